-- Release. $1 name, $2 owner, $3 fence. leased_until 0 (not now) so that a
-- backwards step of the database clock cannot make the lease valid again. The
-- clock is inline so that a release that waited for the row decides validity
-- after the wait (see lease_renew.sql).
UPDATE {{prefix}}leases
SET state = 'released', leased_until_ms = 0, updated_at_ms = {{now_ms}}
WHERE lease_name = $1::text AND owner_token = $2::text AND fence_token = $3::bigint
  AND leased_until_ms > {{now_ms}}
