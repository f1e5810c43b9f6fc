-- River's river_leader as River creates it: UNLOGGED, so it is emptied by a
-- crash (not durable) and its writes skip the WAL.
CREATE UNLOGGED TABLE {{table}} (
	elected_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	leader_id text NOT NULL,
	name text PRIMARY KEY,
	CONSTRAINT name_length CHECK (char_length(name) > 0 AND char_length(name) < 128),
	CONSTRAINT leader_id_length CHECK (char_length(leader_id) > 0 AND char_length(leader_id) < 128)
)
