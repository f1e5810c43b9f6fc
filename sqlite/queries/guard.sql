EXISTS (SELECT 1 FROM {{prefix}}leases AS fence_l WHERE fence_l.lease_name = ? AND fence_l.owner_token = ? AND fence_l.fence_token = ? AND fence_l.leased_until_ms > {{now}})
