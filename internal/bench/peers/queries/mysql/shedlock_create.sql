-- ShedLock's documented MySQL/MariaDB table.
CREATE TABLE {{table}} (
	name VARCHAR(64) NOT NULL,
	lock_until TIMESTAMP(3) NOT NULL,
	locked_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
	locked_by VARCHAR(255) NOT NULL,
	PRIMARY KEY (name)
)
