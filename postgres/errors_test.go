package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fence/internal/testdb"
)

func TestOpenRedactsPassword(t *testing.T) {
	const secret = "s3cr3t-Pw"
	for _, dsn := range []string{
		"postgres://u:" + secret + "@127.0.0.1:notaport/db",
		"postgresql://u:" + secret + "@127.0.0.1:5432/db?sslmode=bogus",
		"postgres://u:" + secret + "@127.0.0.1:5432/db?connect_timeout=abc",
		"postgres://u:" + secret + "@@h:5432/db?sslmode=bogus",              // unescaped '@'
		"postgres://u:" + secret + "/x@h:5432/db?sslmode=bogus",             // unescaped '/'
		"postgres://u:s3cr3t%2DPw@h:5432/db?sslmode=bogus",                  // escaped form of the same password
		"postgres://u@h:5432/db?password=" + secret + "&sslmode=bogus",      // password as a parameter
		"postgres://u@h:5432/db?sslmode=bogus&password=" + secret + "#frag", // last, before a fragment
		"POSTGRES://u:" + secret + "@h:bad/db",
		"mysql://u:" + secret + "@h/db", // wrong scheme
		"u:" + secret + "@h/db",         // no scheme
	} {
		_, err := Open(dsn)
		if err == nil {
			t.Errorf("Open(%q) succeeded", dsn)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, secret) || strings.Contains(msg, "s3cr3t") {
			t.Errorf("Open error leaks the password: %s", msg)
		}
		// Not even in the chain (pgx keeps the DSN in ParseConfigError).
		var pce *pgconn.ParseConfigError
		if errors.As(err, &pce) {
			t.Errorf("Open wraps pgx's ParseConfigError, which holds the DSN: %v", err)
		}
	}
}

func TestOpenConnectErrorHasNoPassword(t *testing.T) {
	const secret = "An0ther-s3cret"
	// Port 1 on the loopback refuses at once.
	db, err := Open("postgres://postgres:" + secret + "@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer db.Close()
	err = db.PingContext(context.Background())
	if err == nil {
		t.Fatal("ping of port 1 succeeded")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("connect error leaks the password: %v", err)
	}
	d, _ := New(db, "p_")
	if !d.IsRetryable(err) {
		t.Errorf("connection refused is not retryable: %v", err)
	}
	if !d.IsServerError(err) {
		t.Errorf("connection refused is not definite (nothing was sent): %v", err)
	}
}

// connect_timeout is a deadline inside pgx, not the caller's: retryable.
func TestConnectTimeoutIsRetryable(t *testing.T) {
	// A server that accepts and then never answers the startup message.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	db, err := Open("postgres://postgres@" + ln.Addr().String() + "/test?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err = db.PingContext(ctx)
	if err == nil || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("ping of a silent server = %v after %v; want a connect timeout", err, time.Since(start))
	}
	d, _ := New(db, "p_")
	if ctx.Err() != nil || !d.IsRetryable(err) || !d.IsServerError(err) {
		t.Errorf("connect timeout: %v (retryable %v, definite %v, caller ctx %v)", err, d.IsRetryable(err), d.IsServerError(err), ctx.Err())
	}
}

func TestOpenAcceptsBothSchemes(t *testing.T) {
	dsn := testdb.PostgresDSN()
	for _, scheme := range []string{"postgres", "postgresql", "PostgreSQL"} {
		_, rest, _ := strings.Cut(dsn, "://")
		db, err := Open(scheme + "://" + rest)
		if err != nil {
			t.Fatalf("Open(%s://…): %v", scheme, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
		if err != nil {
			testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
		}
	}
}

type netTimeout struct{}

func (netTimeout) Error() string   { return "i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

func TestIsRetryableClassification(t *testing.T) {
	d, err := New(&sql.DB{}, "p_")
	if err != nil {
		t.Fatal(err)
	}
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"} }
	retryable := []error{
		pg("40001"), pg("40P01"), pg("55P03"), pg("57014"), pg("57P01"), pg("57P02"), pg("57P03"),
		pg("53300"), pg("08006"), pg("08001"),
		fmt.Errorf("wrapped: %w", pg("40001")),
		sqldriver.ErrBadConn, sql.ErrConnDone, io.EOF, io.ErrUnexpectedEOF,
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET},
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		fmt.Errorf("read: %w", netTimeout{}),
	}
	for _, err := range retryable {
		if !d.IsRetryable(err) {
			t.Errorf("IsRetryable(%v) = false", err)
		}
	}
	answers := []error{
		nil, pg("23505"), pg("42P01"), pg("22001"), pg("42601"), pg("25P02"),
		sql.ErrNoRows, sql.ErrTxDone, errors.New("something else"),
		context.Canceled, context.DeadlineExceeded,
		fmt.Errorf("query: %w", context.DeadlineExceeded),
		// The caller's deadline, even when it surfaces as a network timeout.
		fmt.Errorf("%w: %w", netTimeout{}, context.DeadlineExceeded),
	}
	for _, err := range answers {
		if d.IsRetryable(err) {
			t.Errorf("IsRetryable(%v) = true", err)
		}
	}

	if !d.IsServerError(pg("23505")) || !d.IsServerError(fmt.Errorf("x: %w", pg("40001"))) {
		t.Error("an ERROR from the server is not definite")
	}
	fatal := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}
	if d.IsServerError(fatal) || d.IsServerError(io.ErrUnexpectedEOF) || d.IsServerError(context.DeadlineExceeded) {
		t.Error("a FATAL, a dropped connection or a deadline was reported as a definite refusal")
	}
}

// The same classification on errors the real server and pgx produce.
func TestIsRetryableOnTheServer(t *testing.T) {
	t.Parallel()
	d := newDriver(t)
	ctx := context.Background()

	// statement_timeout: a timeout inside the database, worth a retry.
	conn, err := d.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET statement_timeout = '50ms'"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(ctx, "SELECT pg_sleep(1)")
	if err == nil || !d.IsRetryable(err) || !d.IsServerError(err) {
		t.Errorf("statement_timeout: %v (retryable %v, definite %v)", err, d.IsRetryable(err), d.IsServerError(err))
	}
	if _, err := conn.ExecContext(ctx, "RESET statement_timeout"); err != nil {
		t.Fatal(err)
	}

	// The caller's own deadline, mid-statement: not retryable. On conn,
	// which is connected already, so that on a loaded machine the deadline
	// cannot pass while a new connection is still being dialled instead.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = conn.ExecContext(cctx, "SELECT pg_sleep(1)")
	if err == nil || d.IsRetryable(err) {
		t.Errorf("caller deadline: %v (retryable %v)", err, d.IsRetryable(err))
	}

	// lock_timeout while a fenced transaction holds the lease row.
	tok := acquire(t, d, "job", time.Minute)
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if ok, err := d.LockTx(ctx, tx, tok); err != nil || !ok {
		t.Fatal(ok, err)
	}
	lc, err := d.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if _, err := lc.ExecContext(ctx, "SET lock_timeout = '50ms'"); err != nil {
		t.Fatal(err)
	}
	_, err = lc.ExecContext(ctx, d.q.revoke, "job")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || !d.IsRetryable(err) {
		t.Errorf("lock_timeout: %v (retryable %v)", err, d.IsRetryable(err))
	}
	lc.ExecContext(ctx, "RESET lock_timeout")

	// An error about the statement itself is an answer.
	_, err = d.db.ExecContext(ctx, "SELECT * FROM "+d.prefix+"no_such_table")
	if err == nil || d.IsRetryable(err) || !d.IsServerError(err) {
		t.Errorf("undefined table: %v (retryable %v)", err, d.IsRetryable(err))
	}

	// The server ending the session (pg_terminate_backend, as at a restart).
	victim, err := d.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	var pid int
	if err := victim.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	_, err = victim.ExecContext(ctx, "SELECT 1")
	if err == nil || !d.IsRetryable(err) {
		t.Errorf("terminated session: %v (retryable %v)", err, d.IsRetryable(err))
	}
	if d.IsServerError(err) {
		t.Errorf("terminated session reported as a definite refusal: %v", err)
	}
}

// A COMMIT of a transaction that had failed is answered ROLLBACK: nothing
// committed, so the outcome is definite, not ambiguous (Store.InTx's fn
// that swallowed a failed statement).
func TestCommitAnsweredRollbackIsDefinite(t *testing.T) {
	t.Parallel()
	d := newDriver(t)
	ctx := context.Background()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 succeeded")
	}
	err = tx.Commit()
	if err == nil || !d.IsServerError(err) || d.IsRetryable(err) {
		t.Errorf("commit of a failed transaction: %v (definite %v, retryable %v)", err, d.IsServerError(err), d.IsRetryable(err))
	}
}
