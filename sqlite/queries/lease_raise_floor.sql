-- The default floor of a raise: the database clock in microseconds, the
-- floor every acquisition and revoke already respects.
SELECT {{floor_us:1}}
