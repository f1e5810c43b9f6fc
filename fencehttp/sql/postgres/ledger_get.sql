-- Runs after raise.sql in the same transaction: the lease's fence row is
-- locked, so requests of one lease come here one at a time, and under READ
-- COMMITTED (Guard's transactions use the default level) this statement
-- sees what the previous one committed. Under REPEATABLE READ, raise.sql
-- itself fails with a serialization error when another request of the
-- lease committed after this transaction's snapshot (503, retry).
SELECT fingerprint, fence_token, status, content_type, body FROM {{table}} WHERE lease = $1 AND idem_key = $2
