-- One lease row and the database now. $1 name.
SELECT lease_name, owner_token, holder, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms,
       {{now_ms}}
FROM {{prefix}}leases
WHERE lease_name = $1::text
