-- The lease row a claim names (see the sqlite file). {{lock}} is FOR SHARE
-- inside the tool's transaction: a takeover, replan or cancel (an UPDATE of
-- this row) then waits for the tool's commit, and a takeover that committed
-- first is what this read sees. FOR KEY SHARE would not conflict with the
-- takeover's UPDATE and would fail open. The clock is clock_timestamp(),
-- read when the lock is granted, not at the transaction's start.
SELECT owner_token, fence_token, state,
       CASE WHEN leased_until_ms > {{now}} THEN 1 ELSE 0 END
FROM {{prefix}}leases WHERE lease_name = $1 {{lock}}
