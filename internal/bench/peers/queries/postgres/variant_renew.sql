-- Measurement only, not fence's statement: renew as one plain UPDATE,
-- without fence's lock-first CTE (which keeps a renew that waited behind a
-- fenced transaction from reviving a lease that lapsed meanwhile; this
-- shape does not, so it is a measure of what that costs, not a candidate as
-- it stands). $1 name, $2 owner, $3 fence, $4 TTL ms.
UPDATE {{table}}
SET leased_until_ms = (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint + $4::bigint,
	updated_at_ms = (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint,
	renew_count = renew_count + 1
WHERE lease_name = $1::text AND owner_token = $2::text AND fence_token = $3::bigint
	AND leased_until_ms > (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint
RETURNING leased_until_ms
