package fencehttp

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/fencekit/fence"
)

//go:embed sql
var sqlFiles embed.FS

// Guard runs a handler's database write in the transaction that raised the
// lease's fence: one row per lease in a table of its own keeps the highest
// fence whose write committed (as fence.ExecResource's fence_token column
// does), and the handler's transaction first raises it, refusing a lower
// fence. The row stays locked until the transaction ends, so a stale
// request that passed the check and stalled holds back the newer one
// instead of overwriting it, and a stale request that comes later finds the
// newer fence and writes nothing. This holds across processes and
// restarts, for writes made through the transaction the handler is given.
type Guard struct {
	v       *Verifier
	db      *sql.DB
	dialect fence.Dialect
	create  string
	insert  string
	raise   string

	leases *fence.Store // CheckLeases: the store whose leases the clients hold

	beforeBegin func(Claim) // test hook: a request is about to begin its transaction
}

// CheckLeases makes the Guard read each request's lease from s, the fence
// store whose leases its clients hold, before raising its row: a fence
// above the lease's current fence was never handed out, and is refused as
// forged (403) however it is signed, so that a holder of the signing key
// cannot lock every real holder out by raising the row past them.
// Acquisitions racing the read only raise the lease's fence, so a real
// fence is never refused. Call it before serving.
func (g *Guard) CheckLeases(s *fence.Store) { g.leases = s }

var tableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// NewGuard returns a Guard that checks requests with v and keeps fences in
// table (a plain identifier, created by CreateTable) of db, whose dialect is
// d.
func NewGuard(v *Verifier, db *sql.DB, d fence.Dialect, table string) (*Guard, error) {
	if v == nil || db == nil {
		return nil, fmt.Errorf("%w: fencehttp: NewGuard needs a Verifier and a *sql.DB", fence.ErrInvalid)
	}
	if !tableRE.MatchString(table) {
		return nil, fmt.Errorf("%w: fencehttp: table name %q must be a letter or underscore, then up to 62 letters, digits or underscores", fence.ErrInvalid, clip(table))
	}
	g := &Guard{v: v, db: db, dialect: d}
	for _, q := range []struct {
		dst  *string
		file string
	}{{&g.create, "create"}, {&g.insert, "insert"}, {&g.raise, "raise"}} {
		b, err := sqlFiles.ReadFile("sql/" + string(d) + "/" + q.file + ".sql")
		if err != nil {
			return nil, fmt.Errorf("%w: fencehttp: unknown dialect %q (want sqlite, postgres or mysql)", fence.ErrInvalid, d)
		}
		*q.dst = strings.ReplaceAll(string(b), "{{table}}", table)
	}
	return g, nil
}

// CreateTable creates the guard's table if it does not exist.
func (g *Guard) CreateTable(ctx context.Context) error {
	if _, err := g.db.ExecContext(ctx, g.create); err != nil {
		return fmt.Errorf("fencehttp: creating the guard table: %w", err)
	}
	return nil
}

// TxHandler serves a request whose fence the Guard has raised in tx. It
// makes its writes through tx and returns nil to commit them, or an error
// to roll them back. What it writes to w is held back until the commit
// succeeded, so the client never sees a success that did not commit.
type TxHandler func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) error

// Handler returns h behind the fence check, with the refusals of
// Memory.Handler (412 when the table holds a higher fence, or the same
// fence of another owner). If h returns an error, its transaction is rolled
// back and the client gets h's response if h set a status of 400 or above,
// else 500. A failed commit gets 503: the write may or may not have
// committed. h can read the claim with ClaimFrom. h's writer does not
// support Flush or Hijack, since nothing may reach the client before the
// commit.
func (g *Guard) Handler(h TxHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := g.v.Verify(r)
		if err != nil {
			refuse(w, err)
			return
		}
		r = withClaim(r, c)
		buf := &bufferedWriter{header: http.Header{}}
		var herr error
		err = g.run(r.Context(), c, func(tx *sql.Tx) error {
			herr = h(buf, r, tx)
			return herr
		})
		switch {
		case herr != nil:
			if buf.status >= 400 {
				buf.flush(w)
				return
			}
			http.Error(w, "fencehttp: the handler failed; its write was rolled back", http.StatusInternalServerError)
		case errors.Is(err, errCommit):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case err != nil:
			refuse(w, err)
		default:
			buf.flush(w)
		}
	})
}

var errCommit = errors.New("fencehttp: commit failed; the write may or may not have committed")

// run raises c's fence in a new transaction, runs fn in it and commits if
// fn returns nil.
func (g *Guard) run(ctx context.Context, c Claim, fn func(tx *sql.Tx) error) error {
	if g.leases != nil {
		info, err := g.leases.Get(ctx, c.Lease)
		switch {
		case errors.Is(err, fence.ErrNotFound):
			return fmt.Errorf("%w for lease %q: fence %d, but the lease was never acquired (a forged fence)", ErrSignature, c.Lease, c.Fence)
		case err != nil:
			return fmt.Errorf("fencehttp: lease %q: reading it to check fence %d: %w", c.Lease, c.Fence, err)
		case c.Fence > info.Fence:
			return fmt.Errorf("%w for lease %q: fence %d is above the lease's current fence %d, which no acquisition handed out (a forged fence)", ErrSignature, c.Lease, c.Fence, info.Fence)
		}
	}
	if g.beforeBegin != nil {
		g.beforeBegin(c)
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fencehttp: begin: %w", err)
	}
	defer tx.Rollback() // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, g.insert, c.Lease); err != nil {
		return fmt.Errorf("fencehttp: lease %q: creating its fence row: %w", c.Lease, err)
	}
	args := []any{c.Fence, c.Owner, c.Lease}
	if g.dialect == fence.MySQL {
		args = append(args, c.Fence, c.Fence, c.Owner)
	}
	res, err := tx.ExecContext(ctx, g.raise, args...)
	if err != nil {
		return fmt.Errorf("fencehttp: lease %q fence %d: raising its fence row: %w", c.Lease, c.Fence, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fencehttp: lease %q: %w", c.Lease, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: fencehttp: lease %q fence %d (owner id %s) is stale: a higher fence, or this fence signed for another owner, has written this resource", fence.ErrStale, c.Lease, c.Fence, c.Owner)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: %v", errCommit, err)
	}
	return nil
}

// bufferedWriter holds a response back until the transaction committed.
type bufferedWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.header }

func (b *bufferedWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedWriter) flush(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.WriteHeader(b.status)
	w.Write(b.body.Bytes())
}
