-- run_sweep.sql on a MariaDB Galera node, after run_sweep_galera_bump.sql
-- in the same transaction and at the same time ?, so that it marks exactly
-- the runs whose lease rows that statement wrote (and locked), plus those
-- whose generation has no lease row any more, which no renewal can revive.
UPDATE {{prefix}}runs AS r
LEFT JOIN {{prefix}}leases AS l
  ON l.lease_name = r.lease_name AND l.owner_token = r.owner_token AND l.fence_token = r.fence_token
SET r.status = 'lost', r.finished_at_ms = ?,
    r.error_text = 'swept: its lease generation is no longer valid'
WHERE r.status = 'running' AND (l.lease_name IS NULL OR l.leased_until_ms <= ?)
