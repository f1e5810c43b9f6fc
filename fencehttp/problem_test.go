package fencehttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fence"
)

// A stale fence is a definite refusal (412, ProblemStale) that the client
// reads back as fence.ErrStale and never retries; before issue 30 it was
// 409, the status the Idempotency-Key draft uses for "in flight, retry".
func TestStaleIsProblemNeverRetry(t *testing.T) {
	m := newMemory(t, fixed("job"), 0)
	srv := httptest.NewServer(m.Handler(ok))
	defer srv.Close()
	c := Client(testKey, nil)
	call := func(f int64) (*http.Response, error) {
		ctx := WithToken(context.Background(), tok("job", f, ownerA))
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, CheckResponse(resp)
	}
	if resp, err := call(8); err != nil || resp.StatusCode != 200 {
		t.Fatalf("fence 8: %d %v", resp.StatusCode, err)
	}
	resp, err := call(7)
	var pe *ProblemError
	if resp.StatusCode != http.StatusPreconditionFailed || resp.Header.Get("Content-Type") != ContentTypeProblem {
		t.Fatalf("stale: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !errors.As(err, &pe) || pe.Type != ProblemStale || pe.Retry || !errors.Is(err, fence.ErrStale) || !errors.Is(err, fence.ErrLost) || fence.IsRetryable(err) || errors.Is(err, ErrInFlight) {
		t.Fatalf("stale: %#v", err)
	}
	// Without a step the Transport sends no Idempotency-Key: no key is
	// right for a request it cannot tell apart from a later run's.
	var got []string
	var mu sync.Mutex
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(HeaderIdempotencyKey))
		mu.Unlock()
	}))
	defer srv2.Close()
	for _, ctx := range []context.Context{context.Background(), WithStep(context.Background(), "s")} {
		req, _ := http.NewRequestWithContext(WithToken(ctx, tok("job", 9, ownerA)), "POST", srv2.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(got) != 2 || got[0] != "" || len(got[1]) != 32 {
		t.Fatalf("keys sent %q", got)
	}
}

func TestCheckResponse(t *testing.T) {
	mk := func(status int, ct, body string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader(body))}
	}
	for _, c := range []struct {
		typ       string
		sentinel  error
		retryable bool
	}{
		{ProblemStale, fence.ErrStale, false},
		{ProblemInFlight, ErrInFlight, true},
		{ProblemKeyReused, ErrKeyReused, false},
		{ProblemUnavailable, nil, true},
	} {
		rec := httptest.NewRecorder()
		writeProblem(rec, c.typ, "detail")
		err := CheckResponse(rec.Result())
		var pe *ProblemError
		if !errors.As(err, &pe) || pe.Type != c.typ || pe.Status != problems[c.typ].status || fence.IsRetryable(err) != c.retryable {
			t.Errorf("%s: %v", c.typ, err)
		}
		if c.sentinel != nil && !errors.Is(err, c.sentinel) {
			t.Errorf("%s: not %v", c.typ, c.sentinel)
		}
		if c.typ != ProblemStale && errors.Is(err, fence.ErrStale) {
			t.Errorf("%s reads as stale", c.typ)
		}
	}
	// Other servers' problems and plain errors are the caller's to read.
	other := mk(409, "application/problem+json", `{"type":"https://example.com/x","title":"t"}`)
	if err := CheckResponse(other); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(other.Body); !strings.Contains(string(b), "example.com") {
		t.Fatalf("body of another server's problem consumed: %q", b)
	}
	if err := CheckResponse(mk(409, "text/plain", "conflict")); err != nil {
		t.Fatal(err)
	}
	if err := CheckResponse(mk(200, ContentTypeProblem, "{}")); err != nil {
		t.Fatal(err)
	}
}
