-- The lease row a claim names, as the server checks it: owner token (its
-- digest is compared in Go), fence, state and whether it is still valid by
-- the database clock. ?1 lease name. SQLite has no row locks: in a
-- transaction opened with BEGIN IMMEDIATE (fence's SQLite handles use
-- _txlock=immediate) the write lock already serialises this check, the
-- tool's writes and any takeover.
SELECT owner_token, fence_token, state,
       CASE WHEN leased_until_ms > {{now}} THEN 1 ELSE 0 END
FROM {{prefix}}leases WHERE lease_name = ?1
