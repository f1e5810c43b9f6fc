-- The guarded INSERT ... SELECT: no row unless the token is valid, with the
-- lease row share-locked until the transaction ends.
INSERT INTO {{prefix}}runs (lease_name, owner_token, fence_token, status, started_at_ms, result)
SELECT ?, ?, ?, 'running', {{now}}, NULLIF(?, '') FROM DUAL
WHERE {{guard}}
