-- Runs after raise.sql in the same transaction, which holds the write lock.
SELECT fingerprint, fence_token, status, content_type, body FROM {{table}} WHERE lease = ? AND idem_key = ?
