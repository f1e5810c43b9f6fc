-- The lease row a claim names (see the sqlite file). {{lock}} is LOCK IN
-- SHARE MODE inside the tool's transaction (MariaDB has no FOR SHARE): a
-- takeover waits for the tool's commit, and a locking read sees the latest
-- committed row, not the snapshot. The clock is taken when the expression
-- is evaluated (SYSDATE's offset from the statement start added to
-- UTC_TIMESTAMP), so a wait for the lock does not make it stale.
SELECT owner_token, fence_token, state,
       CASE WHEN leased_until_ms > ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
                                    + TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000) THEN 1 ELSE 0 END
FROM {{prefix}}leases WHERE lease_name = ? {{lock}}
