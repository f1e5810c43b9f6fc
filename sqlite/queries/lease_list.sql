-- One page by name: ?1 the last name of the previous page ('' from the
-- start; names are never empty), ?2 the limit (-1 for none). The primary key
-- serves both the range and the order.
SELECT lease_name, owner_token, holder, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, {{now}}
FROM {{prefix}}leases WHERE lease_name > ?1 ORDER BY lease_name LIMIT ?2
