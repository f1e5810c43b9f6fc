(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint
