-- Runs, newest first. $1 lease ('' for any), $2 status ('' for any), $3 limit
-- (NULL for none), $4 the keyset cursor of the next page (0: from the
-- newest). run_id is an identity, so it orders by start.
SELECT run_id, lease_name, owner_token, holder, fence_token, status, started_at_ms,
       coalesce(finished_at_ms, 0), coalesce(result, ''), coalesce(error_text, ''), exit_code
FROM {{prefix}}runs
WHERE ($1::text = '' OR lease_name = $1::text)
  AND ($2::text = '' OR status = $2::text)
  AND ($4::bigint = 0 OR run_id < $4::bigint)
ORDER BY run_id DESC
LIMIT $3::bigint
