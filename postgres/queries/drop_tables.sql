DROP TABLE IF EXISTS {{prefix}}task_effects, {{prefix}}task_steps, {{prefix}}tasks, {{prefix}}runs, {{prefix}}leases, {{prefix}}schema;
DROP FUNCTION IF EXISTS {{prefix}}lease_until(text)
