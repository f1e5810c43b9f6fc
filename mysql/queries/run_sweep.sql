-- Mark lost every running run whose lease generation is no longer valid.
--
-- Lock, then judge. The lease row is joined, not read in a subquery: in a
-- multi-table UPDATE InnoDB reads the other table's rows with a share lock
-- under READ COMMITTED too, so the latest committed version is read and a
-- renewal in flight is waited for. A NOT EXISTS subquery read a snapshot
-- under READ COMMITTED: a renewal that the server had evaluated while the
-- lease was valid but had not yet committed was missed, and its live run
-- marked lost (measured on MariaDB 10.11, every round of the race test).
-- The LEFT JOIN keeps runs whose lease row is gone or belongs to another
-- generation (NULL), and {{exec_now}} is read per row, after that row's lock
-- was granted, so validity is judged on the locked version at that time.
-- A deadlock against a start of the same lease (which holds the lease row
-- and wants the run rows) is retried by the driver.
UPDATE {{prefix}}runs AS r
LEFT JOIN {{prefix}}leases AS l
  ON l.lease_name = r.lease_name AND l.owner_token = r.owner_token AND l.fence_token = r.fence_token
SET r.status = 'lost', r.finished_at_ms = {{exec_now}},
    r.error_text = 'swept: its lease generation is no longer valid'
WHERE r.status = 'running' AND (l.lease_name IS NULL OR l.leased_until_ms <= {{exec_now}})
