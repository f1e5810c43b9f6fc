-- Start a run. $1 name, $2 owner, $3 fence, $4 detail (JSON text or NULL).
--
-- One statement is one transaction: the guarded insert and the abandoning of
-- older generations' running runs commit together or not at all. The guard
-- share-locks the lease row, so a takeover cannot commit between the check and
-- the insert. abandoned can only see rows committed before this statement, and
-- the new run never matches it (its fence is not lower than itself).
--
-- holder is copied from the lease row of this token. The subquery reads the
-- statement's snapshot, not the locked version the guard saw, but only an
-- acquisition changes holder, together with owner_token and fence_token, so
-- the row matching the token carries the token's holder in either version.
WITH started AS (
    INSERT INTO {{prefix}}runs (lease_name, owner_token, fence_token, status, started_at_ms, result, holder)
    SELECT $1::text, $2::text, $3::bigint, 'running', {{now_ms}}, $4::text,
           coalesce((SELECT h.holder FROM {{prefix}}leases AS h
                     WHERE h.lease_name = $1::text AND h.owner_token = $2::text AND h.fence_token = $3::bigint), '')
    WHERE {{guard}}
    RETURNING run_id, lease_name, fence_token, started_at_ms
),
abandoned AS (
    UPDATE {{prefix}}runs AS r
    SET status = 'abandoned', finished_at_ms = started.started_at_ms,
        error_text = 'superseded by fence ' || started.fence_token
    FROM started
    WHERE r.lease_name = started.lease_name AND r.status = 'running'
      AND r.fence_token < started.fence_token
)
SELECT run_id FROM started
