-- The guarded INSERT ... SELECT: no row unless the token is valid. The lease
-- row is locked FOR UPDATE rather than in share mode: that serialises the
-- starts of one lease from their first statement, where share locks let two
-- starts meet on the runs index (the abandon scan's next-key locks against
-- the other's insert) and deadlock - measured on MariaDB 10.11 under both
-- isolation levels, often enough to exhaust eight retries. It holds off a
-- takeover until commit just the same.
--
-- holder is copied from the lease row of this token, which the EXISTS has
-- locked (only an acquisition changes holder, and then owner_token too).
INSERT INTO {{prefix}}runs (lease_name, owner_token, fence_token, status, started_at_ms, result, holder)
SELECT ?, ?, ?, 'running', {{now}}, NULLIF(?, ''),
       COALESCE((SELECT h.holder FROM {{prefix}}leases AS h
                 WHERE h.lease_name = ? AND h.owner_token = ? AND h.fence_token = ?), '')
FROM DUAL
WHERE EXISTS (
    SELECT 1 FROM {{prefix}}leases AS fence_l
    WHERE fence_l.lease_name = ? AND fence_l.owner_token = ? AND fence_l.fence_token = ? AND fence_l.leased_until_ms > {{exec_now}}
    FOR UPDATE
)
