package fencehttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

var (
	testKey  = []byte("0123456789abcdef0123456789abcdef")
	otherKey = []byte("fedcba9876543210fedcba9876543210")
	ownerA   = strings.Repeat("a", 32)
	ownerB   = strings.Repeat("b", 32)
)

func fixed(name string) func(*http.Request) string {
	return func(*http.Request) string { return name }
}

func tok(lease string, f int64, owner string) fence.Token {
	return fence.Token{Lease: lease, Fence: f, Owner: owner}
}

func sign(t testing.TB, key []byte, tk fence.Token) string {
	t.Helper()
	v, err := Sign(key, tk)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newMemory(t testing.TB, lease func(*http.Request) string, capacity int) *Memory {
	t.Helper()
	v, err := NewVerifier(testKey, lease)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMemory(v, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// serve runs one request with the given Fence-Token values straight through
// h, so that values an HTTP client would normalise reach the parser as is.
func serve(h http.Handler, vals ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/publish", nil)
	for _, v := range vals {
		req.Header.Add(HeaderFence, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

var ok = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

func TestStaleFenceRefusedDownstream(t *testing.T) {
	var mu sync.Mutex
	var accepted []string
	m := newMemory(t, fixed("job"), 0)
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := ClaimFrom(r.Context())
		mu.Lock()
		accepted = append(accepted, c.Lease+"#"+strconv.FormatInt(c.Fence, 10)+" "+r.Header.Get(HeaderIdempotencyKey))
		mu.Unlock()
	})))
	defer srv.Close()
	c := Client(testKey, nil)
	call := func(f int64) int {
		ctx := WithStep(WithToken(context.Background(), tok("job", f, ownerA)), "publish")
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/publish", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if req.Header.Get(HeaderFence) != "" {
			t.Fatal("transport modified the caller's request")
		}
		return resp.StatusCode
	}
	for _, c := range []struct {
		fence int64
		want  int
	}{{7, 200}, {7, 200}, {8, 200}, {7, 412}, {9, 200}, {8, 412}} {
		if got := call(c.fence); got != c.want {
			t.Fatalf("fence %d: status %d, want %d", c.fence, got, c.want)
		}
	}
	if len(accepted) != 4 || accepted[0] != accepted[1] || !strings.HasPrefix(accepted[0], "job#7 ") {
		t.Fatalf("accepted %v (a retry in one generation must send the same key)", accepted)
	}
	// A newer fence retrying the step sends the same key (before issue 30
	// the key contained the fence, and the service ran the step twice).
	key := func(a string) string { return a[strings.IndexByte(a, ' ')+1:] }
	if key(accepted[0]) == "" || key(accepted[2]) != key(accepted[0]) || !strings.HasPrefix(accepted[2], "job#8 ") {
		t.Fatalf("accepted %v: fences 7 and 8 must send one key for one step", accepted)
	}
	resp, err := http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPreconditionRequired {
		t.Fatalf("missing header: %d", resp.StatusCode)
	}
}

func TestTransportUsesJobToken(t *testing.T) {
	s, err := fencedsn.Open(context.Background(), "sqlite:"+t.TempDir()+"/f.db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(testKey, fixed("publisher"))
	if err != nil {
		t.Fatal(err)
	}
	var got Claim
	var verr error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, verr = v.Verify(r)
	}))
	defer srv.Close()
	var held fence.Token
	res, err := fence.Run(context.Background(), s, "publisher", func(ctx context.Context) error {
		held, _ = fence.TokenFrom(ctx)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := Client(testKey, nil).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	if err != nil || res.Outcome != fence.Completed || verr != nil || got != (Claim{Lease: "publisher", Fence: held.Fence, Owner: OwnerID(held.Owner)}) {
		t.Fatalf("%+v %v: claim %+v %v", res, err, got, verr)
	}
}

func TestTransportRefusesToSendUnsigned(t *testing.T) {
	reached := false
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	defer srv.Close()
	for _, key := range [][]byte{nil, []byte("short")} {
		ctx := WithToken(context.Background(), tok("job", 1, ownerA))
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		_, err := Client(key, nil).Do(req)
		if !errors.Is(err, fence.ErrInvalid) || reached {
			t.Fatalf("key %q: %v, reached %v", key, err, reached)
		}
	}
	if _, err := NewVerifier([]byte("short"), fixed("job")); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("short verifier key: %v", err)
	}
}

// The bug this package had: the middleware checked the fence and then ran
// the handler, so a fence-7 request that stalled after its check wrote
// after fence 8's (the same test against the old Middleware ended with
// "7"). Now fence 8 waits for its turn until 7's handler has returned.
func TestMemoryStalledStaleRequestCannotOverwrite(t *testing.T) {
	var mu sync.Mutex
	var writes []int64
	in7, release7 := make(chan struct{}), make(chan struct{})
	m := newMemory(t, fixed("job"), 0)
	waiting8 := make(chan struct{})
	m.beforeWait = func(c Claim) {
		if c.Fence == 8 {
			close(waiting8)
		}
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := ClaimFrom(r.Context())
		if c.Fence == 7 {
			close(in7)
			<-release7 // stalled after the check, before its write
		}
		mu.Lock()
		writes = append(writes, c.Fence)
		mu.Unlock()
	})))
	defer srv.Close()
	do := func(f int64) int {
		req, _ := http.NewRequest("POST", srv.URL, nil)
		req.Header.Set(HeaderFence, sign(t, testKey, tok("job", f, ownerA)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	done7, done8 := make(chan int), make(chan int)
	go func() { done7 <- do(7) }()
	<-in7
	go func() { done8 <- do(8) }()
	<-waiting8
	select {
	case c := <-done8:
		t.Fatalf("fence 8 finished (%d) while fence 7's handler was still running", c)
	default:
	}
	close(release7)
	if c7, c8 := <-done7, <-done8; c7 != 200 || c8 != 200 {
		t.Fatalf("statuses 7:%d 8:%d", c7, c8)
	}
	if c := do(7); c != http.StatusPreconditionFailed {
		t.Fatalf("fence 7 after 8: %d", c)
	}
	if len(writes) != 2 || writes[0] != 7 || writes[1] != 8 {
		t.Fatalf("writes in order %v, want [7 8]: the stale request wrote last", writes)
	}
}

// Before: anyone could send Fence-Token: 9223372036854775807 and lock the
// real holder out until restart (409 for fence 8 on the old Middleware).
func TestForgedFenceRefused(t *testing.T) {
	m := newMemory(t, fixed("job"), 0)
	h := m.Handler(ok)
	valid7 := sign(t, testKey, tok("job", 7, ownerA))
	parts := strings.Split(valid7, ".")
	for _, c := range []struct{ name, val string }{
		{"max fence, made-up MAC", "9223372036854775807." + parts[1] + "." + strings.Repeat("0", 64)},
		{"max fence, MAC of fence 7", "9223372036854775807." + parts[1] + "." + parts[2]},
		{"fence 9 with 7's MAC", "9." + parts[1] + "." + parts[2]},
		{"other owner id with 7's MAC", "7." + strings.Repeat("c", 32) + "." + parts[2]},
		{"signed with another key", sign(t, otherKey, tok("job", 1<<62, ownerA))},
		{"signed for another lease", sign(t, testKey, tok("other", 1<<62, ownerA))},
	} {
		if rec := serve(h, c.val); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "signature does not match") {
			t.Errorf("%s: %d %s", c.name, rec.Code, rec.Body)
		}
	}
	if m.Len() != 0 {
		t.Fatalf("refused requests left %d entries", m.Len())
	}
	if rec := serve(h, sign(t, testKey, tok("job", 8, ownerA))); rec.Code != http.StatusOK {
		t.Fatalf("real holder: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h, valid7); rec.Code != http.StatusPreconditionFailed {
		t.Fatalf("fence 7 after 8: %d %s", rec.Code, rec.Body)
	}
}

func TestMalformedHeadersRefused(t *testing.T) {
	m := newMemory(t, fixed("job"), 0)
	h := m.Handler(ok)
	p := strings.Split(sign(t, testKey, tok("job", 7, ownerA)), ".")
	id, mac := p[1], p[2]
	for _, v := range []string{
		"+7." + id + "." + mac,
		"0007." + id + "." + mac,
		"07." + id + "." + mac,
		"0." + id + "." + mac,
		"-1." + id + "." + mac,
		" 7." + id + "." + mac,
		"7 ." + id + "." + mac,
		"7." + id + "." + mac + " ",
		"7\t." + id + "." + mac,
		"9223372036854775808." + id + "." + mac,
		"99999999999999999999." + id + "." + mac,
		"1e3." + id + "." + mac,
		"0x7." + id + "." + mac,
		"7",
		"7." + id,
		"7." + id + "." + mac + ".x",
		"." + id + "." + mac,
		"7.." + mac,
		"7." + id + ".",
		"7." + strings.ToUpper(id) + "." + mac,
		"7." + id + "." + strings.ToUpper(mac),
		"7." + id[:31] + "." + mac,
		"7." + id + "." + mac[:62],
		"7." + id + "." + mac + "00",
		"7, 8",
		"",
	} {
		rec := serve(h, v)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "want FENCE.OWNER.MAC") {
			t.Errorf("%q: %d %s", v, rec.Code, rec.Body)
		}
	}
	good := sign(t, testKey, tok("job", 7, ownerA))
	if rec := serve(h, good, good); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "sent 2 times") {
		t.Errorf("duplicate header: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h); rec.Code != http.StatusPreconditionRequired {
		t.Errorf("missing header: %d %s", rec.Code, rec.Body)
	}
	if m.Len() != 0 {
		t.Fatalf("refused requests left %d entries", m.Len())
	}
	// A duplicate through a real server and client, not only a recorder.
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Add(HeaderFence, good)
	req.Header.Add(HeaderFence, sign(t, testKey, tok("job", 9, ownerA)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("duplicate over HTTP: %d", resp.StatusCode)
	}
	// The old protocol's headers: a bare fence and a client-chosen lease.
	req, _ = http.NewRequest("POST", srv.URL, nil)
	req.Header.Set(HeaderFence, "9223372036854775807")
	req.Header.Set("Fence-Lease", "job")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("old-style header: %d", resp.StatusCode)
	}
}

// A fence handed to two owners (the lease table went back in time) is
// refused for the second owner.
func TestMemoryEqualFenceOfAnotherOwnerRefused(t *testing.T) {
	h := newMemory(t, fixed("job"), 0).Handler(ok)
	for _, c := range []struct {
		owner string
		want  int
	}{{ownerA, 200}, {ownerA, 200}, {ownerB, 412}} {
		if rec := serve(h, sign(t, testKey, tok("job", 5, c.owner))); rec.Code != c.want {
			t.Fatalf("owner %s: %d %s", c.owner[:1], rec.Code, rec.Body)
		}
	}
}

func TestBadLeaseFunctionIs500(t *testing.T) {
	h := newMemory(t, fixed(""), 0).Handler(ok)
	if rec := serve(h, sign(t, testKey, tok("job", 1, ownerA))); rec.Code != http.StatusInternalServerError {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestMemoryWaitEndsWithRequest(t *testing.T) {
	m := newMemory(t, fixed("job"), 0)
	in, release := make(chan struct{}), make(chan struct{})
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(in)
		<-release
	}))
	go serve(h, sign(t, testKey, tok("job", 1, ownerA)))
	<-in
	ctx, cancel := context.WithCancel(context.Background())
	m.beforeWait = func(Claim) { cancel() }
	req := httptest.NewRequestWithContext(ctx, "POST", "/", nil)
	req.Header.Set(HeaderFence, sign(t, testKey, tok("job", 2, ownerA)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	close(release)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "gave up waiting") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}
