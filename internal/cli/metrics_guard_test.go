package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// --metrics-addr is guarded as fence serve is. Before, it answered any Host
// (a web page could read it through DNS rebinding) and served any address,
// 0.0.0.0 included, with no token.
func TestMetricsAddrGuarded(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()

	addr := freePort(t)
	stop, err := serveMetrics(addr, "", reg, log)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	if got := getStatus(t, addr, "attacker.example:"+port, "/metrics", ""); got != http.StatusMisdirectedRequest {
		t.Errorf("loopback, foreign Host: %d, want 421", got)
	}
	if got := getStatus(t, addr, addr, "/metrics", ""); got != http.StatusOK {
		t.Errorf("loopback, own Host: %d, want 200", got)
	}
	stop()

	// Every interface without a token: refused before listening.
	if _, err := serveMetrics(":"+port, "", reg, log); err == nil {
		t.Fatal("--metrics-addr :PORT without a token was served")
	} else if code, _ := classify(err, "fence run"); code != ExitUsage {
		t.Errorf("--metrics-addr :PORT without a token: %v (exit %d), want a usage error", err, code)
	}
	// The CLI refuses it before taking the lease.
	env := []string{"FENCE_DSN=sqlite:" + filepath.Join(t.TempDir(), "f.db"), "PATH=/usr/bin:/bin"}
	if code, _, errs := mainIn(t, env, "", "migrate"); code != 0 {
		t.Fatal(errs)
	}
	code, _, errs := mainIn(t, env, "", "run", "--lease", "m", "--metrics-addr", ":"+port, "--", "true")
	if code != ExitUsage || !strings.Contains(errs, "--metrics-token-file") {
		t.Errorf("run --metrics-addr :PORT: %d %s", code, errs)
	}

	// With a token, on every interface: the scrape must send it.
	const token = "0123456789abcdef0123456789abcdef"
	stop, err = serveMetrics("0.0.0.0:"+port, token, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if got := getStatus(t, addr, addr, "/metrics", ""); got != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", got)
	}
	if got := getStatus(t, addr, addr, "/metrics", "Bearer "+token); got != http.StatusOK {
		t.Errorf("the token: %d, want 200", got)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readTokenFile("--metrics-token-file", file); err != nil || got != token {
		t.Errorf("readTokenFile: %q %v", got, err)
	}
}

// fence serve's /healthz has a cap of its own: with every --max-requests
// slot taken, the page answers 503 and /healthz still 200. Before, it shared
// the cap and a flood made the server look dead to its probe.
func TestHealthzOutsideRequestCap(t *testing.T) {
	release := make(chan struct{})
	var inside atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Write([]byte("ok\n"))
			return
		}
		inside.Add(1)
		<-release
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := defaultServeLimits
	lim.requests = 2
	srv, cl, err := newServer(h, ln, ln.Addr().String(), "", lim, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(cl) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	}()
	addr := ln.Addr().String()
	blocked := make(chan int, lim.requests)
	for range lim.requests {
		go func() {
			resp, err := http.Get("http://" + addr + "/api/leases")
			if err != nil {
				blocked <- -1
				return
			}
			resp.Body.Close()
			blocked <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for inside.Load() < int32(lim.requests) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests reached the handler", inside.Load(), lim.requests)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := getStatus(t, addr, addr, "/api/runs", ""); got != http.StatusServiceUnavailable {
		t.Errorf("a request beyond the cap: %d, want 503", got)
	}
	if got := getStatus(t, addr, addr, "/healthz", ""); got != http.StatusOK {
		t.Errorf("/healthz with the cap full: %d, want 200", got)
	}
	close(release)
	for range lim.requests {
		<-blocked
	}
}
