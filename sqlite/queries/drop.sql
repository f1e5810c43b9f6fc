DROP TABLE IF EXISTS {{prefix}}task_effects;
DROP TABLE IF EXISTS {{prefix}}task_steps;
DROP TABLE IF EXISTS {{prefix}}tasks;
DROP TABLE IF EXISTS {{prefix}}runs;
DROP TABLE IF EXISTS {{prefix}}leases;
DROP TABLE IF EXISTS {{prefix}}schema;
