package cli

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fence run --metrics-addr serves the lease's metrics while the command runs.
func TestRunServesMetrics(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	b := sqliteOnly(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	flag := filepath.Join(b.dir, "started")
	p := b.start(t, "run", "--lease", "metered", "--metrics-addr", addr, "--", "sh", "-c", "touch "+flag+"; sleep 3")
	waitFile(t, flag, 30*time.Second)
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if strings.Contains(body, `fence_lease_fence{lease="metered"} 1`) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{`fence_lease_fence{lease="metered"} 1`, `fence_acquire_total{lease="metered",outcome="acquired"} 1`, "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}
	if r := p.wait(time.Minute); r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	// A busy address is a usage error, before any lease is taken.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if r := b.fence(t, "run", "--lease", "other", "--metrics-addr", busy.Addr().String(), "--", "true"); r.code != ExitUsage {
		t.Fatalf("busy metrics address: %v", r)
	}
}
