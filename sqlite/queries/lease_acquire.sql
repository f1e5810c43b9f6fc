-- Insert at fence 1, or take over a lease whose leased_until_ms has passed
-- (released and revoked rows have 0). 'now' is fixed for the whole statement
-- in SQLite, and the transaction holds the write lock, so the check and the
-- takeover cannot interleave with another writer.
INSERT INTO {{prefix}}leases AS l
    (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, renew_count)
VALUES (?1, ?2, 1, 'held', {{now}} + ?3, {{now}}, {{now}}, 0)
ON CONFLICT (lease_name) DO UPDATE SET
    owner_token     = excluded.owner_token,
    fence_token     = l.fence_token + 1,
    state           = 'held',
    leased_until_ms = excluded.leased_until_ms,
    acquired_at_ms  = excluded.acquired_at_ms,
    updated_at_ms   = excluded.updated_at_ms,
    renew_count     = 0
WHERE l.leased_until_ms <= excluded.acquired_at_ms
RETURNING fence_token, leased_until_ms, acquired_at_ms
