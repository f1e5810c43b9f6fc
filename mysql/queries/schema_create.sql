CREATE TABLE IF NOT EXISTS {{prefix}}schema (
    version       INT    NOT NULL,
    applied_at_ms BIGINT NOT NULL,
    PRIMARY KEY (version)
) ENGINE = InnoDB
