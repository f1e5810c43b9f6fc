-- ?4 is the keyset cursor of the next page (0: from the newest).
SELECT run_id, lease_name, owner_token, holder, fence_token, status, started_at_ms, COALESCE(finished_at_ms, 0),
       COALESCE(result, ''), COALESCE(error_text, ''), exit_code
FROM {{prefix}}runs
WHERE (?1 = '' OR lease_name = ?1) AND (?2 = '' OR status = ?2) AND (?4 = 0 OR run_id < ?4)
ORDER BY run_id DESC
LIMIT ?3
