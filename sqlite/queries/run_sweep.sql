UPDATE {{prefix}}runs
SET status = 'lost', finished_at_ms = {{now}}, error_text = 'swept: its lease generation is no longer valid'
WHERE status = 'running' AND NOT EXISTS (
    SELECT 1 FROM {{prefix}}leases AS l
    WHERE l.lease_name = {{prefix}}runs.lease_name AND l.owner_token = {{prefix}}runs.owner_token
      AND l.fence_token = {{prefix}}runs.fence_token AND l.leased_until_ms > {{now}}
)
