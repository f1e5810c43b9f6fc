EXISTS (SELECT 1 FROM {{prefix}}leases AS fence_l
 WHERE fence_l.lease_name = {{name}} AND fence_l.owner_token = {{owner}}
 AND fence_l.fence_token = {{fence}} AND fence_l.leased_until_ms > {{now_ms}}
 FOR SHARE OF fence_l)
