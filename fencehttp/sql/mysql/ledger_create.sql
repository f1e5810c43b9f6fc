-- One row per (lease, Idempotency-Key): the response a handler's committed
-- write gave, stored in that write's transaction. fingerprint (hex SHA-256
-- of method, target and body) tells a retry from another request under the
-- same key; fence_token is the fence whose request committed it.
-- VARBINARY: byte-wise keys, as the fence table's lease.
CREATE TABLE IF NOT EXISTS {{table}} (
    lease        VARBINARY(191) NOT NULL,
    idem_key     VARBINARY(255) NOT NULL,
    fingerprint  CHAR(64)       NOT NULL,
    fence_token  BIGINT         NOT NULL,
    status       INT            NOT NULL,
    content_type VARCHAR(255)   NOT NULL,
    body         LONGBLOB       NOT NULL,
    PRIMARY KEY (lease, idem_key)
) ENGINE = InnoDB
