-- Is-held. $1 name, $2 owner, $3 fence. A plain read: it locks nothing, so it
-- is only an answer about one instant, never a fence for a later write.
SELECT EXISTS (
    SELECT 1 FROM {{prefix}}leases
    WHERE lease_name = $1::text AND owner_token = $2::text AND fence_token = $3::bigint
      AND leased_until_ms > {{now_ms}}
)
