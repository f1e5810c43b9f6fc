-- Read on the acquire's own connection when its OK packet carried insert id
-- 0: LAST_INSERT_ID() is the session's value, which the acquire set (0 when
-- held), and which a trigger on the table does not disturb, while it does
-- zero the OK packet's copy. The holder comes in the same round trip; the
-- LEFT JOIN keeps the row of LAST_INSERT_ID() when the lease row is gone.
SELECT LAST_INSERT_ID(), l.lease_name, l.owner_token, l.holder, l.fence_token, l.state,
       l.leased_until_ms, l.acquired_at_ms, l.updated_at_ms, {{now}}
FROM (SELECT 1 AS one) AS x
LEFT JOIN {{prefix}}leases AS l ON l.lease_name = ?
