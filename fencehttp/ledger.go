package fencehttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/fencekit/fence"
)

// DefaultMaxBody is the largest request body a Ledger made with maxBody 0
// reads (it hashes the body to tell a retry from another request).
const DefaultMaxBody = 1 << 20

// MaxKeyLen is the longest Idempotency-Key a Ledger accepts.
const MaxKeyLen = 255

// HeaderReplayed is set to "true" on a response a Ledger replayed from its
// table instead of running the handler.
const HeaderReplayed = "Idempotent-Replayed"

// Ledger is Guard with an outcome per Idempotency-Key: the effect ledger's
// rule on the receiving side. The handler's write, the fence check and the
// response are committed in one transaction, keyed by (lease, key), never
// by the fence:
//
//   - a request whose key committed before gets the stored response (with
//     Idempotent-Replayed: true) and the handler does not run, whichever
//     fence sent it, as long as the fence is not stale;
//   - a stale fence is refused (412, ProblemStale) before the key is read;
//   - the same key with another method, target or body is 422
//     (ProblemKeyReused);
//   - a request whose key is being served in this process is 409
//     (ProblemInFlight, retry later); across processes the second request
//     waits for the first on the lease's fence row and then replays it;
//   - a request without a key is 400 (ProblemNoKey).
//
// Since the write and its record commit together there is no step in
// doubt here: a handler error or a failed commit leaves neither. A commit
// whose outcome is unknown is 503; retrying with the same key is safe.
type Ledger struct {
	g       *Guard
	maxBody int64
	create  string
	get     string
	put     string

	mu       sync.Mutex
	inFlight map[string]bool // lease + "\x00" + key, served now by this Ledger
}

// NewLedger returns a Ledger over g that keeps outcomes in table (a plain
// identifier, created by CreateTable) of g's database. maxBody bounds the
// request bodies it reads (DefaultMaxBody if 0); a larger one is 413.
func NewLedger(g *Guard, table string, maxBody int64) (*Ledger, error) {
	if g == nil {
		return nil, fmt.Errorf("%w: fencehttp: NewLedger needs a Guard", fence.ErrInvalid)
	}
	if !tableRE.MatchString(table) {
		return nil, fmt.Errorf("%w: fencehttp: table name %q must be a letter or underscore, then up to 62 letters, digits or underscores", fence.ErrInvalid, clip(table))
	}
	if maxBody < 0 {
		return nil, fmt.Errorf("%w: fencehttp: maxBody %d is negative", fence.ErrInvalid, maxBody)
	}
	if maxBody == 0 {
		maxBody = DefaultMaxBody
	}
	l := &Ledger{g: g, maxBody: maxBody, inFlight: map[string]bool{}}
	for _, q := range []struct {
		dst  *string
		file string
	}{{&l.create, "ledger_create"}, {&l.get, "ledger_get"}, {&l.put, "ledger_put"}} {
		b, err := sqlFiles.ReadFile("sql/" + string(g.dialect) + "/" + q.file + ".sql")
		if err != nil {
			return nil, fmt.Errorf("fencehttp: %s: %w", q.file, err)
		}
		*q.dst = strings.ReplaceAll(string(b), "{{table}}", table)
	}
	return l, nil
}

// CreateTable creates the ledger's table if it does not exist (the Guard's
// table is created by Guard.CreateTable).
func (l *Ledger) CreateTable(ctx context.Context) error {
	if _, err := l.g.db.ExecContext(ctx, l.create); err != nil {
		return fmt.Errorf("fencehttp: creating the ledger table: %w", err)
	}
	return nil
}

var (
	errKeyReused = fmt.Errorf("%w for another request (method, target or body)", ErrKeyReused)
	errInFlight  = fmt.Errorf("%w; retry later with the same key", ErrInFlight)
)

// Handler returns h behind the fence check and the ledger. h is called at
// most once per committed key; its writes go through tx. What it writes to
// w is stored with the key (status, Content-Type and body) when its
// transaction commits, and sent then.
func (l *Ledger) Handler(h TxHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := l.g.v.Verify(r)
		if err != nil {
			refuse(w, err)
			return
		}
		key := r.Header.Get(HeaderIdempotencyKey)
		if why := badKey(r.Header.Values(HeaderIdempotencyKey)); why != "" {
			writeProblem(w, ProblemNoKey, why)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.maxBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeProblem(w, ProblemTooLarge, fmt.Sprintf("the body is over %d bytes", l.maxBody))
				return
			}
			writeProblem(w, ProblemUnavailable, "reading the request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r = withClaim(r, c)
		buf := &bufferedWriter{header: http.Header{}}
		var herr error
		st, replayed, err := l.do(r.Context(), c, key, fingerprint(r, body), func(tx *sql.Tx) (stored, error) {
			if herr = h(buf, r, tx); herr != nil {
				return stored{}, herr
			}
			if buf.status == 0 {
				buf.status = http.StatusOK
			}
			return stored{status: buf.status, contentType: buf.header.Get("Content-Type"), body: buf.body.Bytes()}, nil
		})
		switch {
		case herr != nil:
			if buf.status >= 400 {
				buf.flush(w)
				return
			}
			http.Error(w, "fencehttp: the handler failed; its write was rolled back", http.StatusInternalServerError)
		case errors.Is(err, errInFlight):
			writeProblem(w, ProblemInFlight, fmt.Sprintf("a request with this Idempotency-Key for lease %q is being served", c.Lease))
		case errors.Is(err, errKeyReused):
			writeProblem(w, ProblemKeyReused, err.Error())
		case err != nil:
			// A stale fence (412), a commit in doubt or a database error
			// (503: retry with the same key; a committed outcome replays).
			refuse(w, err)
		case replayed:
			buf = &bufferedWriter{header: http.Header{}}
			st.replay(buf)
			buf.flush(w)
		default:
			buf.flush(w)
		}
	})
}

// Outcome is what Ledger.Do returns.
type Outcome struct {
	Result []byte
	// Replayed: the key committed before; Result is the stored one and fn
	// did not run.
	Replayed bool
	// Fence is the fence whose call committed the outcome.
	Fence int64
}

// Do is Handler's rule for a call that does not arrive as an HTTP request
// (an MCP tool call, a queue message): in one transaction it raises c's
// fence (a stale one is refused with an error wrapping fence.ErrStale),
// then returns the stored outcome of key if it committed before (Replayed;
// request must be the same bytes, else ErrKeyReused), else runs fn and
// stores its result with fn's writes. A key being served by this Ledger is
// ErrInFlight. c must be a claim the caller verified (Verifier.Verify, or
// the transport's own signature check): Do trusts its fence and owner.
func (l *Ledger) Do(ctx context.Context, c Claim, key string, request []byte, fn func(ctx context.Context, tx *sql.Tx) ([]byte, error)) (Outcome, error) {
	if err := fence.ValidateName(c.Lease); err != nil {
		return Outcome{}, err
	}
	if why := badKey([]string{key}); why != "" {
		return Outcome{}, fmt.Errorf("%w: fencehttp: %s", fence.ErrInvalid, why)
	}
	if fn == nil {
		return Outcome{}, fmt.Errorf("%w: fencehttp: Ledger.Do needs a function", fence.ErrInvalid)
	}
	sum := sha256.Sum256(append([]byte("fencehttp/do\n"), request...))
	st, replayed, err := l.do(ctx, c, key, hex.EncodeToString(sum[:]), func(tx *sql.Tx) (stored, error) {
		res, err := fn(ctx, tx)
		if res == nil {
			res = []byte{}
		}
		return stored{body: res}, err
	})
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Result: st.body, Replayed: replayed, Fence: st.fence}, nil
}

// do runs fn under c's raised fence unless key has an outcome, and stores
// fn's outcome with its writes.
func (l *Ledger) do(ctx context.Context, c Claim, key, fp string, fn func(tx *sql.Tx) (stored, error)) (out stored, replayed bool, err error) {
	slot := c.Lease + "\x00" + key
	if !l.enter(slot) {
		return stored{}, false, errInFlight
	}
	defer l.leave(slot)
	err = l.g.run(ctx, c, func(tx *sql.Tx) error {
		var st stored
		err := tx.QueryRowContext(ctx, l.get, c.Lease, key).Scan(&st.fingerprint, &st.fence, &st.status, &st.contentType, &st.body)
		switch {
		case err == nil:
			if st.fingerprint != fp {
				return errKeyReused
			}
			out, replayed = st, true
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("fencehttp: lease %q: reading the key's outcome: %w", c.Lease, err)
		}
		st, err = fn(tx)
		if err != nil {
			return err
		}
		st.fingerprint, st.fence = fp, c.Fence
		if _, err := tx.ExecContext(ctx, l.put, c.Lease, key, fp, c.Fence, st.status, st.contentType, st.body); err != nil {
			return fmt.Errorf("fencehttp: lease %q: storing the key's outcome: %w", c.Lease, err)
		}
		out = st
		return nil
	})
	return out, replayed, err
}

func (l *Ledger) enter(slot string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[slot] {
		return false
	}
	l.inFlight[slot] = true
	return true
}

func (l *Ledger) leave(slot string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.inFlight, slot)
}

// badKey says what is wrong with the request's Idempotency-Key values.
func badKey(vals []string) string {
	switch {
	case len(vals) == 0:
		return "this endpoint stores outcomes per Idempotency-Key; send one per effect (fencehttp.WithStep makes the Transport send one)"
	case len(vals) > 1:
		return fmt.Sprintf("%s sent %d times, want once", HeaderIdempotencyKey, len(vals))
	}
	k := vals[0]
	if k == "" || len(k) > MaxKeyLen {
		return fmt.Sprintf("%s must be 1 to %d bytes", HeaderIdempotencyKey, MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Sprintf("%s must be printable ASCII without spaces", HeaderIdempotencyKey)
		}
	}
	return ""
}

// fingerprint identifies the request a key was used for.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	for _, p := range []string{r.Method, r.URL.RequestURI()} {
		h.Write([]byte(strconv.Itoa(len(p)) + ":" + p))
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

type stored struct {
	fingerprint string
	fence       int64
	status      int
	contentType string
	body        []byte
}

func (s stored) replay(b *bufferedWriter) {
	if s.contentType != "" {
		b.header.Set("Content-Type", s.contentType)
	}
	b.header.Set(HeaderReplayed, "true")
	b.WriteHeader(s.status)
	b.body.Write(s.body)
}
