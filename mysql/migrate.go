package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

const (
	erNoSuchTable  = 1146
	erDupFieldName = 1060
)

// Migrate applies the embedded migrations that <prefix>schema does not list
// and returns the schema version.
//
// DDL commits implicitly in MySQL, so a transaction cannot serialise two
// migrating processes; a named lock (GET_LOCK) on one connection does (on
// one server: on Galera, see below). The
// lock belongs to the session: if this process dies, the server frees it.
func (d *Driver) Migrate(ctx context.Context) (int, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := d.migrateLock(ctx, conn); err != nil {
		return 0, err
	}
	defer func() {
		// Even when ctx has ended: a lock left on a pooled connection would
		// block every later Migrate until that connection closes.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var released sql.NullInt64
		if err := conn.QueryRowContext(uctx, d.q["migrate_unlock"], d.prefix).Scan(&released); err != nil {
			// Discard the connection; closing the session frees the lock.
			conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		}
	}()
	// On MariaDB Galera GET_LOCK is local to one node, so migrations through
	// two nodes can meet; the loser's statement fails certification (1213)
	// and the whole migration runs again, which completes what the other
	// one did (every step is re-runnable, see migrate).
	var v int
	err = d.retryDeadlock(ctx, func() error {
		var err error
		v, err = d.migrate(ctx, conn)
		return err
	})
	return v, err
}

// migrateLock waits for the migration lock in short GET_LOCK calls so that
// ctx is honoured between them.
func (d *Driver) migrateLock(ctx context.Context, conn *sql.Conn) error {
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, d.q["migrate_lock"], d.prefix, 2).Scan(&got); err != nil {
			return fmt.Errorf("mysql: taking the migration lock: %w", err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mysql: waiting for the migration lock: %w", err)
		}
	}
}

func (d *Driver) migrate(ctx context.Context, conn *sql.Conn) (int, error) {
	files, err := fs.Glob(Migrations, "migrations/*.sql")
	if err != nil {
		return 0, err
	}
	slices.Sort(files)
	if _, err := conn.ExecContext(ctx, d.q["schema_create"]); err != nil {
		return 0, err
	}
	var have int
	if err := conn.QueryRowContext(ctx, d.q["schema_version"]).Scan(&have); err != nil {
		return 0, err
	}
	v := have
	for _, f := range files {
		n, err := strconv.Atoi(strings.SplitN(path.Base(f), "_", 2)[0])
		if err != nil {
			return 0, fmt.Errorf("mysql: migration %s: name must start with a number", f)
		}
		if n <= have {
			continue
		}
		b, err := Migrations.ReadFile(f)
		if err != nil {
			return 0, err
		}
		for _, st := range splitStatements(string(b)) {
			if _, err := conn.ExecContext(ctx, d.expand(st)); err != nil {
				if addsColumnAgain(st, err) {
					continue
				}
				return 0, fmt.Errorf("mysql: migration %s: %w", f, err)
			}
		}
		if _, err := conn.ExecContext(ctx, d.q["schema_insert"], n); err != nil {
			return 0, err
		}
		v = n
	}
	return v, nil
}

// addsColumnAgain reports whether err is "duplicate column" from an ALTER
// TABLE … ADD COLUMN: the statement committed in an earlier Migrate that died
// before it recorded the version. DDL commits on its own in MySQL and MySQL 8
// has no ADD COLUMN IF NOT EXISTS, so this is how a re-run completes. Each
// ALTER adds all of its columns atomically (atomic DDL on MySQL 8 and
// MariaDB 10.6+), so a column already there means the whole statement is.
func addsColumnAgain(stmt string, err error) bool {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != erDupFieldName {
		return false
	}
	f := strings.Fields(strings.ToUpper(stmt))
	return len(f) > 4 && f[0] == "ALTER" && f[1] == "TABLE" && f[3] == "ADD"
}

// SchemaVersion returns the applied version, 0 when fence's tables are absent.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.db.QueryRowContext(ctx, d.q["schema_version"]).Scan(&v)
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == erNoSuchTable {
		return 0, nil
	}
	return v, err
}

// DropTables drops fence's tables.
func (d *Driver) DropTables(ctx context.Context) error {
	_, err := d.db.ExecContext(ctx, d.q["drop"])
	return err
}
