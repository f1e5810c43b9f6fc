-- Appended to lease_acquire.sql on MariaDB 10.5+, which has INSERT ...
-- RETURNING (MySQL 8 has not), so that a refused acquire is answered in the
-- same round trip as a successful one. RETURNING sees the row as the
-- statement left it: the new generation, or the holder's unchanged row.
-- LAST_INSERT_ID() there is this statement's value of the session's insert
-- id: the new fence (inserted or taken over) or 0 (held), measured on
-- MariaDB 10.11; a trigger on the table, which zeroes the insert id of the
-- OK packet, does not touch it. {{now}} is the same statement-start instant
-- as in the IFs.
RETURNING LAST_INSERT_ID(), lease_name, owner_token, holder, fence_token, state,
    leased_until_ms, acquired_at_ms, updated_at_ms, {{now}}
