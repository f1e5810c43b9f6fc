(floor(extract(epoch FROM clock_timestamp()) * 1000000))::bigint
