-- Runs after raise.sql in the same transaction: the lease's fence row is
-- locked, so requests of one lease come here one at a time. LOCK IN SHARE
-- MODE is a locking read, which sees the latest committed row also under
-- REPEATABLE READ (a plain SELECT would read the transaction's snapshot).
SELECT fingerprint, fence_token, status, content_type, body FROM {{table}} WHERE lease = ? AND idem_key = ? LOCK IN SHARE MODE
