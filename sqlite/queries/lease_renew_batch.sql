-- ?1 is a JSON array of [name, owner, fence]; one statement renews them all
-- and returns the ones that were still valid.
UPDATE {{prefix}}leases AS l
SET leased_until_ms = {{now}} + ?2, updated_at_ms = {{now}}, renew_count = l.renew_count + 1
FROM (SELECT value ->> 0 AS n, value ->> 1 AS o, value ->> 2 AS f FROM json_each(?1)) AS t
WHERE l.lease_name = t.n AND l.owner_token = t.o AND l.fence_token = t.f AND l.leased_until_ms > {{now}}
RETURNING lease_name, fence_token, leased_until_ms, updated_at_ms
