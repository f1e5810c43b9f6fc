-- Delete finished runs older than a retention: lease name ('' for every
-- lease), retention in milliseconds. A running run is never deleted, however
-- old: it is either live or waiting to be swept lost.
DELETE FROM {{prefix}}runs
WHERE status <> 'running'
  AND finished_at_ms < {{now}} - ?
  AND (? = '' OR lease_name = ?)
