-- River's election: only when there is no leader row.
INSERT INTO {{table}} (name, leader_id, elected_at, expires_at)
VALUES ($1, $2, now(), now() + CAST($3 AS interval))
ON CONFLICT (name) DO NOTHING
