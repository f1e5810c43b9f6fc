-- River's elector first deletes an expired leader, in the same transaction
-- as the (re)election that follows.
DELETE FROM {{table}} WHERE name = $1 AND expires_at < now()
