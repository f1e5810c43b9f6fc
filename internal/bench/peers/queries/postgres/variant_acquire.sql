-- Measurement only, not fence's statement: acquire as one plain UPDATE of
-- the existing row of fence's own lease table (issue 17 §3's proposal),
-- taken only when the lease has lapsed by the database's clock. A name
-- never seen needs fence's upsert instead (done untimed, once per name).
-- $1 name, $2 owner, $3 TTL ms.
WITH clock AS MATERIALIZED (
	SELECT (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint AS now_ms,
		(floor(extract(epoch FROM clock_timestamp()) * 1000000))::bigint AS floor_us
)
UPDATE {{table}} AS l
SET owner_token = $2::text,
	fence_token = GREATEST(l.fence_token + 1, clock.floor_us),
	state = 'held',
	leased_until_ms = clock.now_ms + $3::bigint,
	acquired_at_ms = clock.now_ms,
	updated_at_ms = clock.now_ms,
	renew_count = 0
FROM clock
WHERE l.lease_name = $1::text AND l.leased_until_ms <= clock.now_ms
RETURNING l.fence_token
