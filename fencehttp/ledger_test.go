package fencehttp

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/teststore"
)

// ledgerEnv is a Ledger whose handler's effect is a counter in the same
// database: each run of the handler adds one, and answers the count.
type ledgerEnv struct {
	t       *testing.T
	db      *sql.DB
	d       fence.Dialect
	counter string
	srv     *httptest.Server
	ledger  *Ledger
	entered chan struct{}
	release chan struct{}
}

func newLedgerEnv(t *testing.T, b teststore.Backend) *ledgerEnv {
	s := b.Open(t)
	e := &ledgerEnv{t: t, db: s.DB(), d: s.Dialect(), counter: s.Prefix() + "http_counter", entered: make(chan struct{}, 10), release: make(chan struct{})}
	fences, outcomes := s.Prefix()+"http_fences", s.Prefix()+"http_outcomes"
	ctx := context.Background()
	t.Cleanup(func() {
		for _, tb := range []string{fences, outcomes, e.counter} {
			e.db.ExecContext(ctx, "DROP TABLE "+tb)
		}
	})
	if _, err := e.db.ExecContext(ctx, "CREATE TABLE "+e.counter+" (id INT PRIMARY KEY, n INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.counter+" (id, n) VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(testKey, fixed("agent"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(v, e.db, e.d, fences)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLedger(g, outcomes, 64)
	if err != nil {
		t.Fatal(err)
	}
	e.ledger = l
	for _, err := range []error{g.CreateTable(ctx), l.CreateTable(ctx), l.CreateTable(ctx)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	e.srv = httptest.NewServer(l.Handler(func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) error {
		if r.URL.Query().Get("stall") != "" {
			e.entered <- struct{}{}
			<-e.release
		}
		if _, err := tx.ExecContext(r.Context(), "UPDATE "+e.counter+" SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		if r.URL.Query().Get("fail") != "" {
			return errors.New("failed after its write")
		}
		var n int
		if err := tx.QueryRowContext(r.Context(), "SELECT n FROM "+e.counter+" WHERE id = 1").Scan(&n); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged #"+strconv.Itoa(n))
		return nil
	}))
	t.Cleanup(e.srv.Close)
	return e
}

type ledgerReply struct {
	status   int
	body     string
	replayed bool
	err      error // CheckResponse's
}

func (e *ledgerEnv) do(f int64, owner, key, target, body string) ledgerReply {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+target, strings.NewReader(body))
	req.Header.Set(HeaderFence, sign(e.t, testKey, tok("agent", f, owner)))
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Error(err)
		return ledgerReply{}
	}
	defer resp.Body.Close()
	rep := ledgerReply{status: resp.StatusCode, replayed: resp.Header.Get(HeaderReplayed) == "true"}
	rep.err = CheckResponse(resp)
	if rep.err == nil {
		b, _ := io.ReadAll(resp.Body)
		rep.body = string(b)
	}
	return rep
}

func (e *ledgerEnv) count() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT n FROM " + e.counter + " WHERE id = 1").Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// The receiving side keys outcomes by Idempotency-Key, never by fence: a
// newer fence's retry is answered from the table, an older fence is 412,
// another request under the key 422, no key 400.
func TestLedgerOutcomePerKeyAcrossFences(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		e := newLedgerEnv(t, b)
		first := e.do(7, ownerA, "k1", "/charge", "5 EUR")
		if first.status != http.StatusCreated || first.body != "charged #1" || first.replayed || e.count() != 1 {
			t.Fatalf("first: %+v, count %d", first, e.count())
		}
		for _, f := range []int64{7, 8} { // a retry, then a newer fence's retry
			got := e.do(f, ownerB, "k1", "/charge", "5 EUR")
			if f == 7 { // fence 7 of another owner is a repeated fence: refused
				if !errors.Is(got.err, fence.ErrStale) {
					t.Fatalf("fence 7 of another owner: %+v", got)
				}
				continue
			}
			if got.status != http.StatusCreated || got.body != "charged #1" || !got.replayed {
				t.Fatalf("fence %d retrying k1: %+v", f, got)
			}
		}
		if n := e.count(); n != 1 {
			t.Fatalf("the handler's effect ran %d times, want 1", n)
		}
		stale := e.do(7, ownerA, "k1", "/charge", "5 EUR")
		var pe *ProblemError
		if stale.status != http.StatusPreconditionFailed || !errors.As(stale.err, &pe) || pe.Type != ProblemStale || fence.IsRetryable(stale.err) {
			t.Fatalf("older fence: %+v", stale)
		}
		if got := e.do(8, ownerB, "k1", "/charge", "500 EUR"); got.status != http.StatusUnprocessableEntity || !errors.Is(got.err, ErrKeyReused) {
			t.Fatalf("same key, other body: %+v", got)
		}
		if got := e.do(8, ownerB, "k1", "/refund", "5 EUR"); !errors.Is(got.err, ErrKeyReused) {
			t.Fatalf("same key, other target: %+v", got)
		}
		if got := e.do(8, ownerB, "", "/charge", "5 EUR"); got.status != http.StatusBadRequest || !errors.As(got.err, &pe) || pe.Type != ProblemNoKey {
			t.Fatalf("no key: %+v", got)
		}
		if got := e.do(8, ownerB, "k 2", "/charge", "5 EUR"); got.status != http.StatusBadRequest {
			t.Fatalf("key with a space: %+v", got)
		}
		if got := e.do(8, ownerB, "k2", "/charge", strings.Repeat("x", 65)); got.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("body over the bound: %+v", got)
		}
		// A failed handler stores nothing and its write rolls back: the
		// retry runs it.
		if got := e.do(8, ownerB, "k2", "/charge?fail=1", ""); got.status != http.StatusInternalServerError || e.count() != 1 {
			t.Fatalf("failed handler: %+v, count %d", got, e.count())
		}
		if got := e.do(8, ownerB, "k2", "/charge?fail=", ""); got.status != http.StatusCreated || got.body != "charged #2" {
			t.Fatalf("after the failure: %+v", got)
		}
	})
}

// A second request with a key being served is 409 in flight (retryable),
// not 412, and the first one's outcome is then replayed to it.
func TestLedgerInFlight(t *testing.T) {
	e := newLedgerEnv(t, teststore.SQLite)
	done := make(chan ledgerReply, 1)
	go func() { done <- e.do(7, ownerA, "k", "/charge?stall=1", "") }()
	<-e.entered
	got := e.do(7, ownerA, "k", "/charge?stall=1", "")
	close(e.release)
	if got.status != http.StatusConflict || !errors.Is(got.err, ErrInFlight) || !fence.IsRetryable(got.err) || errors.Is(got.err, fence.ErrStale) {
		t.Fatalf("second request in flight: %+v", got)
	}
	if first := <-done; first.status != http.StatusCreated {
		t.Fatalf("first: %+v", first)
	}
	if again := e.do(7, ownerA, "k", "/charge?stall=1", ""); !again.replayed || again.body != "charged #1" {
		t.Fatalf("retry after the first: %+v", again)
	}
}

// End to end: a holder's Transport names the step, so a newer fence
// retrying it sends the key the older one sent and gets its outcome; with
// the old default key (it had the fence) the charge ran twice.
func TestLedgerTransportStepAcrossFences(t *testing.T) {
	e := newLedgerEnv(t, teststore.SQLite)
	c := Client(testKey, nil)
	call := func(f int64) ledgerReply {
		ctx := WithStep(WithToken(context.Background(), tok("agent", f, ownerA)), "charge-order-17")
		req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/charge", strings.NewReader("5 EUR"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return ledgerReply{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get(HeaderReplayed) == "true"}
	}
	if got := call(7); got.status != http.StatusCreated || got.replayed {
		t.Fatalf("fence 7: %+v", got)
	}
	if got := call(8); got.status != http.StatusCreated || !got.replayed || got.body != "charged #1" {
		t.Fatalf("fence 8 retrying the step: %+v", got)
	}
	if n := e.count(); n != 1 {
		t.Fatalf("charged %d times, want 1", n)
	}
}

// Ledger.Do is the same rule for a call that is not an HTTP request (an MCP
// tool call): outcome per key across fences, a stale fence refused, the
// same key with other bytes refused, a key being served in flight.
func TestLedgerDo(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		e := newLedgerEnv(t, b)
		l := e.ledger
		ctx := context.Background()
		runs := 0
		fn := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			runs++
			_, err := tx.ExecContext(ctx, "UPDATE "+e.counter+" SET n = n + 1 WHERE id = 1")
			return []byte("done " + strconv.Itoa(runs)), err
		}
		c7 := Claim{Lease: "agent", Fence: 7, Owner: OwnerID(ownerA)}
		c8 := Claim{Lease: "agent", Fence: 8, Owner: OwnerID(ownerB)}
		got, err := l.Do(ctx, c7, "call-1", []byte(`{"x":1}`), fn)
		if err != nil || got.Replayed || string(got.Result) != "done 1" || got.Fence != 7 {
			t.Fatalf("first: %+v %v", got, err)
		}
		got, err = l.Do(ctx, c8, "call-1", []byte(`{"x":1}`), fn)
		if err != nil || !got.Replayed || string(got.Result) != "done 1" || got.Fence != 7 {
			t.Fatalf("newer fence retrying: %+v %v", got, err)
		}
		if _, err := l.Do(ctx, c7, "call-1", []byte(`{"x":1}`), fn); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("older fence: %v", err)
		}
		if _, err := l.Do(ctx, c8, "call-1", []byte(`{"x":2}`), fn); !errors.Is(err, ErrKeyReused) {
			t.Fatalf("other bytes: %v", err)
		}
		if _, err := l.Do(ctx, c8, "", nil, fn); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("empty key: %v", err)
		}
		var inner error
		if _, err := l.Do(ctx, c8, "call-2", nil, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			_, inner = l.Do(ctx, c8, "call-2", nil, fn)
			return nil, nil
		}); err != nil || !errors.Is(inner, ErrInFlight) {
			t.Fatalf("nested call with the key in flight: %v, inner %v", err, inner)
		}
		if runs != 1 || e.count() != 1 {
			t.Fatalf("fn ran %d times, counter %d; want 1", runs, e.count())
		}
	})
}
