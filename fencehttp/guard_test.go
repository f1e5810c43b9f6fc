package fencehttp

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/teststore"
)

// guardEnv is a Guard over a fresh fence table and a one-row feed table
// that its handler writes, on one database.
type guardEnv struct {
	t      *testing.T
	db     *sql.DB
	d      fence.Dialect
	fences string
	feed   string
	g      *Guard
	srv    *httptest.Server
	called chan string   // bodies the handler was asked to write
	stall  func(c Claim) // runs in the handler before its write
}

// stall and beforeBegin are set before the server starts, so that its
// goroutines read them race-free.
func newGuardEnv(t *testing.T, b teststore.Backend, stall, beforeBegin func(Claim)) *guardEnv {
	s := b.Open(t)
	e := &guardEnv{stall: stall, t: t, db: s.DB(), d: s.Dialect(), fences: s.Prefix() + "http_fences", feed: s.Prefix() + "http_feed", called: make(chan string, 100)}
	ctx := context.Background()
	t.Cleanup(func() {
		e.db.ExecContext(ctx, "DROP TABLE "+e.fences)
		e.db.ExecContext(ctx, "DROP TABLE "+e.feed)
	})
	if _, err := e.db.ExecContext(ctx, "CREATE TABLE "+e.feed+" (id INT PRIMARY KEY, body VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.feed+" (id, body) VALUES (1, ''), (2, '')"); err != nil {
		t.Fatal(err)
	}
	// The route picks the lease: /publisher, /race.
	v, err := NewVerifier(testKey, func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/") })
	if err != nil {
		t.Fatal(err)
	}
	if e.g, err = NewGuard(v, e.db, e.d, e.fences); err != nil {
		t.Fatal(err)
	}
	e.g.beforeBegin = beforeBegin
	if err := e.g.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.g.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable twice: %v", err)
	}
	update := "UPDATE " + e.feed + " SET body = ? WHERE id = ?"
	if e.d == fence.Postgres {
		update = "UPDATE " + e.feed + " SET body = $1 WHERE id = $2"
	}
	e.srv = httptest.NewServer(e.g.Handler(func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) error {
		c, _ := ClaimFrom(r.Context())
		body := r.URL.Query().Get("body")
		e.called <- body
		if e.stall != nil {
			e.stall(c)
		}
		id := 1
		if c.Lease == "race" {
			id = 2
		}
		if _, err := tx.ExecContext(r.Context(), update, body, id); err != nil {
			return err
		}
		switch r.URL.Query().Get("fail") {
		case "500":
			return errors.New("handler failed after its write")
		case "422":
			http.Error(w, "no such thing", http.StatusUnprocessableEntity)
			return errors.New("refused by the handler")
		}
		w.Header().Set("X-Written", body)
		w.Write([]byte("ok " + body))
		return nil
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *guardEnv) do(lease string, f int64, owner, body, fail string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q := url.Values{"body": {body}}
	if fail != "" {
		q.Set("fail", fail)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/"+lease+"?"+q.Encode(), nil)
	req.Header.Set(HeaderFence, sign(e.t, testKey, tok(lease, f, owner)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Written")
}

func (e *guardEnv) body(id int) string {
	e.t.Helper()
	q := "SELECT body FROM " + e.feed + " WHERE id = ?"
	if e.d == fence.Postgres {
		q = "SELECT body FROM " + e.feed + " WHERE id = $1"
	}
	var b string
	if err := e.db.QueryRow(q, id).Scan(&b); err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *guardEnv) drainCalls() []string {
	var got []string
	for {
		select {
		case b := <-e.called:
			got = append(got, b)
		default:
			return got
		}
	}
}

func TestGuardRefusesStaleWrites(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		e := newGuardEnv(t, b, nil, nil)
		steps := []struct {
			f           int64
			owner, body string
			fail        string
			want        int
			feed        string
		}{
			{7, ownerA, "a7", "", 200, "a7"},
			{8, ownerB, "b8", "", 200, "b8"},
			{7, ownerA, "late7", "", 412, "b8"},        // a newer fence committed: refused before the handler
			{8, ownerB, "b8again", "", 200, "b8again"}, // equal fence, same owner
			{8, ownerA, "a8", "", 412, "b8again"},      // equal fence, another owner: fence repeated
			{9, ownerA, "a9", "500", 500, "b8again"},   // handler error: write and fence rolled back
			{9, ownerA, "a9", "422", 422, "b8again"},   // handler's own refusal reaches the client
			{8, ownerB, "b8last", "", 200, "b8last"},   // fence 9 never committed, so 8 still writes
		}
		for i, s := range steps {
			code, written := e.do("publisher", s.f, s.owner, s.body, s.fail)
			if code != s.want || e.body(1) != s.feed {
				t.Fatalf("step %d fence %d: status %d, feed %q; want %d, %q", i, s.f, code, e.body(1), s.want, s.feed)
			}
			if (code == 200) != (written == s.body) {
				t.Fatalf("step %d: the client saw X-Written %q with status %d", i, written, code)
			}
		}
		if got := e.drainCalls(); strings.Join(got, ",") != "a7,b8,b8again,a9,a9,b8last" {
			t.Fatalf("handler called for %v; a refused fence must not reach it", got)
		}
	})
}

// The race the old Middleware lost: fence 7 passes the check and stalls
// before its write while fence 8 arrives. Fence 8 must wait for 7's
// transaction to end and write after it; a fence 7 that arrives after 8
// committed writes nothing.
func TestGuardStalledStaleRequestCannotOverwrite(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		in7, release7 := make(chan struct{}), make(chan struct{})
		begin8 := make(chan struct{})
		e := newGuardEnv(t, b, func(c Claim) {
			if c.Lease == "race" && c.Fence == 7 && c.Owner == OwnerID(ownerA) {
				close(in7)
				<-release7
			}
		}, func(c Claim) {
			if c.Fence == 8 {
				close(begin8)
			}
		})
		var once sync.Once
		release := func() { once.Do(func() { close(release7) }) }
		t.Cleanup(release) // before the server's Close, which waits for fence 7's handler
		done7, done8 := make(chan int, 1), make(chan int, 1)
		go func() { c, _ := e.do("race", 7, ownerA, "s7", ""); done7 <- c }()
		<-in7
		go func() { c, _ := e.do("race", 8, ownerB, "s8", ""); done8 <- c }()
		<-begin8
		waited := e.waitLockWait(done8)
		select {
		case c := <-done8:
			t.Fatalf("fence 8 finished (%d) while fence 7's transaction was open", c)
		default:
		}
		if !waited {
			t.Fatal("no transaction ever waited for the fence row")
		}
		release()
		if c7, c8 := <-done7, <-done8; c7 != 200 || c8 != 200 {
			t.Fatalf("statuses 7:%d 8:%d", c7, c8)
		}
		if got := e.body(2); got != "s8" {
			t.Fatalf("feed %q: the stale request wrote last", got)
		}
		if c, _ := e.do("race", 7, ownerA, "late7", ""); c != http.StatusPreconditionFailed || e.body(2) != "s8" {
			t.Fatalf("late fence 7: status %d, feed %q", c, e.body(2))
		}
	})
}

// waitLockWait waits until fence 8's statement on the fence table waits
// on the server, queued behind fence 7, or done reports fence 8 finished.
// SQLite has no view of a waiting BEGIN IMMEDIATE, and there every write
// transaction queues behind any other (fence opens it with one connection
// and _txlock=immediate), so the test relies on beforeBegin and the order
// of the results.
func (e *guardEnv) waitLockWait(done <-chan int) bool {
	var q string
	switch e.d {
	case fence.Postgres:
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'"
	case fence.MySQL:
		// MariaDB 10.11 leaves an INSERT waiting for another transaction's
		// uncommitted row out of INNODB_TRX (measured: only fence 7's
		// transaction listed, fence 8's INSERT in PROCESSLIST state
		// "Update" for 30 s), so wait for a statement on the fence table
		// that has run for a second: an unblocked one takes milliseconds,
		// and if it finishes instead, done reports it.
		q = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND = 'Query' AND TIME >= 1 AND INFO LIKE CONCAT('%', ?, '%')"
	default:
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && len(done) == 0 {
		var n int
		if err := e.db.QueryRow(q, e.fences).Scan(&n); err != nil {
			e.t.Error(err)
			return false
		}
		if n > 0 {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func TestNewGuardRefusesBadInput(t *testing.T) {
	v, _ := NewVerifier(testKey, fixed("job"))
	for _, c := range []struct {
		name  string
		d     fence.Dialect
		table string
	}{
		{"injection", fence.SQLite, "t; DROP TABLE x"},
		{"quoted", fence.Postgres, `"t"`},
		{"empty", fence.MySQL, ""},
		{"dialect", "oracle", "t"},
	} {
		if _, err := NewGuard(v, &sql.DB{}, c.d, c.table); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, err := NewGuard(nil, &sql.DB{}, fence.SQLite, "t"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil verifier: %v", err)
	}
}
