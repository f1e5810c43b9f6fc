-- {{exec_now}}, not the statement start: the WHERE is evaluated after the row
-- lock is granted, and a renew that waited behind a long share lock (a user's
-- fenced transaction) must not extend a lease that lapsed while it waited.
-- An expired generation therefore never becomes valid again, which the run
-- sweep relies on.
--
-- The new expiry comes back as the insert id, so one round trip gives both
-- the answer and leased_until_ms (now = leased_until_ms - ttl). renew_count
-- changes on every renew, so the row always counts as affected, with or
-- without CLIENT_FOUND_ROWS.
UPDATE {{prefix}}leases
SET renew_count = renew_count + 1,
    updated_at_ms = {{exec_now}},
    leased_until_ms = LAST_INSERT_ID({{exec_now}} + ?)
WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > {{exec_now}}
