-- A generation that is not valid never becomes valid again (renew and
-- release judge expiry at lock time, acquire makes a new fence), so the
-- NOT EXISTS may read a snapshot: what it finds lost stays lost.
UPDATE {{prefix}}runs AS r
SET r.status = 'lost', r.finished_at_ms = {{now}}, r.error_text = 'swept: its lease generation is no longer valid'
WHERE r.status = 'running' AND NOT EXISTS (
    SELECT 1 FROM {{prefix}}leases AS l
    WHERE l.lease_name = r.lease_name AND l.owner_token = r.owner_token
      AND l.fence_token = r.fence_token AND l.leased_until_ms > {{now}}
)
