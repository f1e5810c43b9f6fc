package mysql

import "github.com/fencekit/fence/internal/driver"

// LeaseAcquire's first statement, as driver.Hints chooses it; here the full
// statement is the upsert.
const (
	pathUpsert    = driver.PathFull
	pathUpdate    = driver.PathUpdate
	pathReadFirst = driver.PathReadFirst
)
