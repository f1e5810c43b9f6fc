-- River's resignation: delete this leader's row and notify the others in
-- the same statement.
WITH currently_held_leaders AS (
	SELECT name, leader_id FROM {{table}}
	WHERE name = $1 AND leader_id = $2
	FOR UPDATE
),
notified_resignations AS (
	SELECT pg_notify($3, json_build_object('name', name, 'leader_id', leader_id, 'action', 'resigned')::text),
		currently_held_leaders.name
	FROM currently_held_leaders
)
DELETE FROM {{table}} USING notified_resignations
WHERE {{table}}.name = notified_resignations.name
