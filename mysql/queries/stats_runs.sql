-- Runs by status, then lost and abandoned runs by loss reason, counted by
-- the database so that a scrape reads a few rows whatever the ledger's size.
-- The ledger stores no reason code, only the text its writers put in
-- error_text: run_abandon ('superseded by fence N'), run_sweep ('swept: …' or,
-- on PostgreSQL, '… (swept)'),
-- a refused fenced completion ('completion rejected: <the LostError>') and the
-- runner's MarkRunLost (the cause's text: an UnprovenError or a LostError).
-- The patterns below match those texts; anything else (a reason of the
-- caller's own) is 'other'. The first rows have reason '' and are the
-- per-status totals.
SELECT status, '' AS reason, COUNT(*) AS n
FROM {{prefix}}runs
GROUP BY status
UNION ALL
SELECT status, reason, COUNT(*) AS n
FROM (
    SELECT status,
       CASE
           WHEN status = 'abandoned' THEN 'abandoned'
           WHEN error_text LIKE 'swept:%' OR error_text LIKE '%(swept)' THEN 'swept'
           WHEN error_text LIKE 'completion rejected:%' THEN 'rejected'
           WHEN error_text LIKE '%: no renewal succeeded within %' THEN 'unproven'
           WHEN error_text LIKE '% superseded by fence %' THEN 'superseded'
           WHEN error_text LIKE '% revoked (fence is now %' THEN 'revoked'
           WHEN error_text LIKE '% expired by the database clock%' THEN 'expired'
           WHEN error_text LIKE '% was released%' THEN 'released'
           WHEN error_text LIKE '%: the lease row no longer exists%' THEN 'missing'
           ELSE 'other'
       END AS reason
    FROM {{prefix}}runs
    WHERE status IN ('lost', 'abandoned')
) AS l
GROUP BY status, reason
ORDER BY 1, 2
