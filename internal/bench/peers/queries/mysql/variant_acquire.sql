-- Measurement only, not fence's statement: acquire as one plain UPDATE of
-- the existing row of fence's own lease table (issue 17 §3's proposal),
-- taken only when the lease has lapsed by the database's clock at execution
-- (after any row lock wait). The new fence comes back as the insert id in
-- the OK packet, so one round trip gives the answer and the fence. A name
-- never seen needs fence's upsert instead (done once per name).
-- Parameters: owner, TTL ms, name.
UPDATE {{table}}
SET owner_token = ?,
	fence_token = LAST_INSERT_ID(GREATEST(fence_token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))),
	state = 'held',
	leased_until_ms = ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) + TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000) + ?,
	acquired_at_ms = ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) + TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000),
	updated_at_ms = ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) + TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000),
	renew_count = 0
WHERE lease_name = ?
	AND leased_until_ms <= ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) + TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000)
