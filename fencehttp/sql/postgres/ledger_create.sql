-- One row per (lease, Idempotency-Key): the response a handler's committed
-- write gave, stored in that write's transaction. fingerprint (hex SHA-256
-- of method, target and body) tells a retry from another request under the
-- same key; fence_token is the fence whose request committed it.
CREATE TABLE IF NOT EXISTS {{table}} (
    lease        TEXT    NOT NULL,
    idem_key     TEXT    NOT NULL,
    fingerprint  TEXT    NOT NULL,
    fence_token  BIGINT  NOT NULL,
    status       INTEGER NOT NULL,
    content_type TEXT    NOT NULL,
    body         BYTEA   NOT NULL,
    PRIMARY KEY (lease, idem_key)
)
