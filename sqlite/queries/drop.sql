DROP TABLE IF EXISTS {{prefix}}runs;
DROP TABLE IF EXISTS {{prefix}}leases;
DROP TABLE IF EXISTS {{prefix}}schema;
