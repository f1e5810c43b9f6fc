DROP TABLE IF EXISTS {{prefix}}runs, {{prefix}}leases, {{prefix}}schema
