-- River's re-election: extends the row only if this leader holds it.
INSERT INTO {{table}} (name, leader_id, elected_at, expires_at)
VALUES ($1, $2, now(), now() + CAST($3 AS interval))
ON CONFLICT (name) DO UPDATE SET expires_at = now() + CAST($3 AS interval)
WHERE {{table}}.leader_id = $2
