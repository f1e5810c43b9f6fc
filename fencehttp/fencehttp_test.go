package fencehttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fence"
)

func TestStaleFenceRefusedDownstream(t *testing.T) {
	var mu sync.Mutex
	var accepted []string
	srv := httptest.NewServer(Middleware(&MemoryChecker{}, nil, false)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepted = append(accepted, r.Header.Get(HeaderFence)+" "+r.Header.Get(HeaderIdempotencyKey))
		mu.Unlock()
	})))
	defer srv.Close()
	c := Client(nil)
	owner := strings.Repeat("a", 32)
	call := func(f int64) int {
		ctx := WithToken(context.Background(), fence.Token{Lease: "job", Owner: owner, Fence: f})
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
	}{{7, 200}, {7, 200}, {8, 200}, {7, 409}, {9, 200}, {8, 409}} {
		if got := call(c.fence); got != c.want {
			t.Fatalf("fence %d: status %d, want %d", c.fence, got, c.want)
		}
	}
	if len(accepted) != 4 || accepted[0] != accepted[1] {
		t.Fatalf("accepted %v (a retry in one generation must send the same key)", accepted)
	}
	resp, err := http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPreconditionRequired {
		t.Fatalf("missing header: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set(HeaderFence, "-3")
	req.Header.Set(HeaderLease, "job")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad header: %d", resp.StatusCode)
	}
}

func TestTransportUsesJobToken(t *testing.T) {
	s, err := fence.Open(context.Background(), "sqlite:"+t.TempDir()+"/f.db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get(HeaderLease) + "#" + r.Header.Get(HeaderFence)
	}))
	defer srv.Close()
	res, err := fence.Run(context.Background(), s, "publisher", func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := Client(nil).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	if err != nil || res.Outcome != fence.Completed || got != "publisher#1" {
		t.Fatalf("%+v %v header %q", res, err, got)
	}
}
