package driver

import (
	"context"
	"database/sql"
)

// LeaseStat is a lease row as a metrics scrape reads it. It never carries
// the owner token: only its first 8 characters.
type LeaseStat struct {
	Name          string
	Holder        string // the holder name, or the first 8 characters of the owner token of a row without one
	Fence         int64
	State         string
	LeasedUntilMs int64
	LastSuccessMs int64 // finish of the lease's last succeeded run; 0 if none
}

// RunCount is the number of runs in the ledger with a status and, for lost
// and abandoned runs, a loss reason derived from the run's error text ("" for
// the per-status total).
type RunCount struct {
	Status string
	Reason string
	Count  int64
}

// Stats is what a metrics scrape reads from the database.
type Stats struct {
	NowMs      int64 // database clock of the lease read
	LeaseCount int64 // every lease row, of which Leases holds the first by name
	Leases     []LeaseStat
	Runs       []RunCount
}

// Stater is implemented by drivers that can read Stats in two statements:
// the first maxLeases leases by name with the lease count, and the run
// counts aggregated by the database.
type Stater interface {
	Stats(ctx context.Context, maxLeases int) (Stats, error)
}

// Rows is the part of *sql.Rows (and pgx.Rows) the Stats scanners use.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanLeaseStats reads the rows of a stats_leases.sql statement (clock,
// count, then the lease columns, NULL on the one row of an empty read) into
// st.
func ScanLeaseStats(rows Rows, st *Stats) error {
	for rows.Next() {
		var (
			name, owner, state        sql.NullString
			fence, until, lastSuccess sql.NullInt64
		)
		if err := rows.Scan(&st.NowMs, &st.LeaseCount, &name, &owner, &fence, &state, &until, &lastSuccess); err != nil {
			return err
		}
		if !name.Valid {
			continue
		}
		st.Leases = append(st.Leases, LeaseStat{Name: name.String, Holder: owner.String, Fence: fence.Int64,
			State: state.String, LeasedUntilMs: until.Int64, LastSuccessMs: lastSuccess.Int64})
	}
	return rows.Err()
}

// ScanRunCounts reads the rows of a stats_runs.sql statement into st.
func ScanRunCounts(rows Rows, st *Stats) error {
	for rows.Next() {
		var c RunCount
		if err := rows.Scan(&c.Status, &c.Reason, &c.Count); err != nil {
			return err
		}
		st.Runs = append(st.Runs, c)
	}
	return rows.Err()
}

// ReadStats runs a driver's two stats statements on db: leases (its one
// parameter the lease limit) and run counts. The SQLite and MySQL drivers
// share it; PostgreSQL reads through its pool or handle itself.
func ReadStats(ctx context.Context, db *sql.DB, leasesQ, runsQ string, maxLeases int) (Stats, error) {
	var st Stats
	rows, err := db.QueryContext(ctx, leasesQ, max(maxLeases, 0))
	if err != nil {
		return st, err
	}
	err = ScanLeaseStats(rows, &st)
	rows.Close()
	if err != nil {
		return st, err
	}
	rows, err = db.QueryContext(ctx, runsQ)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	return st, ScanRunCounts(rows, &st)
}
