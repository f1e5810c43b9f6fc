-- The rows of the batch's leases after its UPDATEs; Go picks the tokens that
-- are valid. A lapsed generation never becomes valid again, so a token valid
-- here was renewed by the UPDATE just before; one the UPDATE renewed but that
-- was released since is reported as not renewed, which is what it is by now.
-- {{names}} is a list of placeholders only.
SELECT lease_name, owner_token, fence_token, leased_until_ms, {{now}}
FROM {{prefix}}leases
WHERE lease_name IN ({{names}})
