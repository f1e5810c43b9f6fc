-- The epochs of the tasks updated last (package task's tables), one row per
-- (task, epoch) with what the database kept of it: its first and last
-- write, its effects committed, and its effect claims still open (claimed
-- or in doubt). The task's own row adds its current epoch and state.
-- Arguments: the task id ('' for all), the same again, the most tasks.
SELECT a.task_id, a.epoch, MIN(a.first_ms), MAX(a.last_ms), SUM(a.committed), SUM(a.open_claims),
       t.epoch, t.state, t.updated_at_ms
FROM (
    SELECT task_id, epoch, claimed_at_ms AS first_ms, updated_at_ms AS last_ms,
           CASE WHEN state = 'committed' THEN 1 ELSE 0 END AS committed,
           CASE WHEN state = 'committed' THEN 0 ELSE 1 END AS open_claims
    FROM {{prefix}}task_effects
    UNION ALL
    SELECT task_id, epoch, created_at_ms, created_at_ms, 1, 0 FROM {{prefix}}task_steps
    UNION ALL
    SELECT task_id, epoch, updated_at_ms, updated_at_ms, 0, 0 FROM {{prefix}}tasks WHERE epoch > 0
) a
JOIN (
    SELECT task_id, epoch, state, updated_at_ms FROM {{prefix}}tasks
    WHERE epoch > 0 AND (? = '' OR task_id = ?)
    ORDER BY updated_at_ms DESC, task_id
    LIMIT ?
) t ON t.task_id = a.task_id
GROUP BY a.task_id, a.epoch, t.epoch, t.state, t.updated_at_ms
ORDER BY a.task_id, a.epoch
