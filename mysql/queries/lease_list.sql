-- One page by name: the last name of the previous page ('' from the start;
-- names are never empty), then the limit. The primary key serves both the
-- range and the order.
SELECT lease_name, owner_token, holder, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, {{now}}
FROM {{prefix}}leases WHERE lease_name > ? ORDER BY lease_name LIMIT ?
