-- Insert, or take over a lease whose leased_until_ms has passed (released
-- and revoked rows have 0). The new fence is max(old + 1, floor), the floor
-- being the database clock in microseconds (at SQLite's millisecond
-- resolution), so that a database restored from an older copy still hands
-- out fences above every fence handed out before (docs/adr/0004-fence-floor.md). 'now' is fixed for the whole statement
-- in SQLite, and the transaction holds the write lock, so the check and the
-- takeover cannot interleave with another writer.
INSERT INTO {{prefix}}leases AS l
    (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, renew_count, holder)
VALUES (?1, ?2, {{floor_us:5}}, 'held', {{now}} + ?3, {{now}}, {{now}}, 0, ?4)
ON CONFLICT (lease_name) DO UPDATE SET
    owner_token     = excluded.owner_token,
    holder          = excluded.holder,
    fence_token     = max(l.fence_token + 1, excluded.fence_token),
    state           = 'held',
    leased_until_ms = excluded.leased_until_ms,
    acquired_at_ms  = excluded.acquired_at_ms,
    updated_at_ms   = excluded.updated_at_ms,
    renew_count     = 0
WHERE l.leased_until_ms <= excluded.acquired_at_ms
RETURNING fence_token, leased_until_ms, acquired_at_ms
