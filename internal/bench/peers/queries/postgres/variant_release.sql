-- Measurement only, not fence's statement: release as one plain UPDATE,
-- without the lock-first CTE and without the waiter notification.
-- $1 name, $2 owner, $3 fence.
UPDATE {{table}}
SET state = 'released', leased_until_ms = 0,
	updated_at_ms = (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint
WHERE lease_name = $1::text AND owner_token = $2::text AND fence_token = $3::bigint
	AND leased_until_ms > (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint
