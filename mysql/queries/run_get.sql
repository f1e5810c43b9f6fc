SELECT run_id, lease_name, owner_token, holder, fence_token, status, started_at_ms, COALESCE(finished_at_ms, 0),
       COALESCE(result, ''), COALESCE(error_text, ''), exit_code
FROM {{prefix}}runs WHERE run_id = ?
