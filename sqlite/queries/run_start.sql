INSERT INTO {{prefix}}runs (lease_name, owner_token, fence_token, status, started_at_ms, result, holder)
SELECT l.lease_name, l.owner_token, l.fence_token, 'running', {{now}}, NULLIF(?4, ''), l.holder
FROM {{prefix}}leases AS l
WHERE l.lease_name = ?1 AND l.owner_token = ?2 AND l.fence_token = ?3 AND l.leased_until_ms > {{now}}
RETURNING run_id
