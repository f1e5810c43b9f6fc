-- River's river_leader, as a logged (durable) table: River creates it
-- UNLOGGED (river_create_unlogged.sql); this is the variant that survives a
-- crash, for comparison at equal durability.
CREATE TABLE {{table}} (
	elected_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	leader_id text NOT NULL,
	name text PRIMARY KEY,
	CONSTRAINT name_length CHECK (char_length(name) > 0 AND char_length(name) < 128),
	CONSTRAINT leader_id_length CHECK (char_length(leader_id) > 0 AND char_length(leader_id) < 128)
)
