-- Delete finished runs older than a retention. $1 lease name ('' for every
-- lease), $2 retention in milliseconds. A running run is never deleted,
-- however old: it is either live or waiting to be swept lost, and both must
-- stay visible.
DELETE FROM {{prefix}}runs
WHERE status <> 'running'
  AND finished_at_ms < {{now_ms}} - $2::bigint
  AND ($1::text = '' OR lease_name = $1::text)
