-- Mark lost every running run whose lease generation is no longer valid.
--
-- The lease row of the run's generation is share-locked before its validity
-- is judged (the inner SELECT has no validity condition, the outer one tests
-- it), and the clock is read after the lock. A renew that checked validity
-- just before expiry but commits after this statement's snapshot is waited
-- for and then seen, instead of its run being swept as expired. Rows of other
-- generations do not match the inner SELECT and are not locked.
UPDATE {{prefix}}runs AS r
SET status = 'lost', finished_at_ms = {{now_ms}},
    error_text = 'lease generation no longer valid (swept)'
WHERE r.status = 'running'
  AND NOT EXISTS (
      SELECT 1
      FROM (SELECT l.leased_until_ms
            FROM {{prefix}}leases AS l
            WHERE l.lease_name = r.lease_name AND l.owner_token = r.owner_token
              AND l.fence_token = r.fence_token
            FOR SHARE OF l) AS gen
      WHERE gen.leased_until_ms > {{now_ms}}
  )
