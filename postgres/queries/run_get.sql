-- One run. $1 run id.
SELECT run_id, lease_name, owner_token, holder, fence_token, status, started_at_ms,
       coalesce(finished_at_ms, 0), coalesce(result, ''), coalesce(error_text, ''), exit_code
FROM {{prefix}}runs
WHERE run_id = $1::bigint
