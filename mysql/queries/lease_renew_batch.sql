-- {{tokens}} is a derived table of (n, o, f) rows built from placeholders
-- only (see tokensTable). Each row's validity is judged when its lock is
-- granted ({{exec_now}}), as in lease_renew.sql.
UPDATE {{prefix}}leases AS l
JOIN ({{tokens}}) AS t ON l.lease_name = t.n AND l.owner_token = t.o AND l.fence_token = t.f
SET l.renew_count = l.renew_count + 1,
    l.updated_at_ms = {{exec_now}},
    l.leased_until_ms = {{exec_now}} + ?
WHERE l.leased_until_ms > {{exec_now}}
