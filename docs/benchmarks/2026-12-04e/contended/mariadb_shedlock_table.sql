-- ShedLock's documented MySQL/MariaDB table with 1,000 free names.
DROP TABLE IF EXISTS zz_shed;
CREATE TABLE zz_shed (
	name VARCHAR(64) NOT NULL,
	lock_until TIMESTAMP(3) NOT NULL,
	locked_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
	locked_by VARCHAR(255) NOT NULL,
	PRIMARY KEY (name)
);
INSERT INTO zz_shed SELECT CONCAT('n-', seq), UTC_TIMESTAMP(3) - INTERVAL 1 DAY, UTC_TIMESTAMP(3), 'x' FROM seq_0_to_999;
