(floor(extract(epoch FROM statement_timestamp()) * 1000000))::bigint
