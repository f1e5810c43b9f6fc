-- Delete finished runs older than a retention. ?1 lease name ('' for every
-- lease), ?2 retention in milliseconds. A running run is never deleted,
-- however old: it is either live or waiting to be swept lost.
DELETE FROM {{prefix}}runs
WHERE status <> 'running'
  AND finished_at_ms < {{now}} - ?2
  AND (?1 = '' OR lease_name = ?1)
