package driver

import (
	"database/sql"
	"time"
)

// LimitOwned bounds db's pool when the driver owns it (OpenDriver opened
// it): a caller's own handle is the caller's to size. The three drivers'
// LimitPool.
func LimitOwned(db *sql.DB, owned bool, maxOpen int, maxLifetime, maxIdleTime time.Duration) {
	if !owned || db == nil {
		return
	}
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(maxOpen)
	db.SetConnMaxLifetime(maxLifetime)
	db.SetConnMaxIdleTime(maxIdleTime)
}

// CloseOwned closes db when the driver owns it, and does nothing
// otherwise. The three drivers' Close.
func CloseOwned(db *sql.DB, owned bool) error {
	if !owned || db == nil {
		return nil
	}
	return db.Close()
}
