\set i random(0,999)
\set r random(1000000000,9999999999)
\set fence_token 0
UPDATE zz_leases AS l SET owner_token = ('o'||:r), leased_until_ms = (floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint + 60000 WHERE l.lease_name = ('c'||:i) AND l.leased_until_ms <= (floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint;
UPDATE zz_leases AS l SET state = 'released', leased_until_ms = 0, updated_at_ms = (floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint WHERE l.lease_name = ('c'||:i) AND l.owner_token = ('o'||:r) AND l.leased_until_ms > (floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint;
