-- Is-held. $1 name, $2 owner, $3 fence. A plain read: it locks nothing, so it
-- is only an answer about one instant, never a fence for a later write.
-- One row when held, none otherwise: measured interleaved against SELECT 1,
-- this is cheaper than SELECT EXISTS (...) (1.23x against 1.32x).
SELECT true FROM {{prefix}}leases
WHERE lease_name = $1::text AND owner_token = $2::text AND fence_token = $3::bigint
  AND leased_until_ms > {{now_ms}}
