-- The first statement of the sweep on a MariaDB Galera node: write every
-- lease row whose generation the sweep is about to judge dead (expired at
-- the sweep's time ?, with a running run). The joined lease row's share
-- lock in run_sweep.sql holds off only renewals through this node; this
-- write puts the rows into the sweep's write set, so a renewal committed
-- through another node before the sweep's COMMIT makes the sweep fail
-- certification (1213: retried, and the retry sees the renewal), and one
-- committed after it fails instead. No lease is renewed whose run was
-- marked lost.
UPDATE {{prefix}}leases AS l
JOIN {{prefix}}runs AS r
  ON r.lease_name = l.lease_name AND r.owner_token = l.owner_token AND r.fence_token = l.fence_token
SET l.guard_seq = l.guard_seq + 1
WHERE r.status = 'running' AND l.leased_until_ms <= ?
