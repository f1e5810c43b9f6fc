-- Which tokens are valid after the batch renew. A lapsed generation never
-- becomes valid again, so a token valid here was renewed by the UPDATE just
-- before; one the UPDATE renewed but that was released since is reported as
-- not renewed, which is what it is by now.
SELECT l.lease_name, l.owner_token, l.fence_token, l.leased_until_ms, {{now}}
FROM {{prefix}}leases AS l
JOIN ({{tokens}}) AS t ON l.lease_name = t.n AND l.owner_token = t.o AND l.fence_token = t.f
WHERE l.leased_until_ms > {{now}}
