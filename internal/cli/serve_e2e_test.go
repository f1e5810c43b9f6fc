package cli

import (
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fence serve shows the held lease and answers /healthz; SIGINT stops it
// with status 0.
func TestServe(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	b := sqliteOnly(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	hold := b.start(t, "run", "--lease", "served-lease", "--", "sleep", "5")
	p := b.start(t, "serve", "--addr", addr)
	var page string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(page, "served-lease") {
		time.Sleep(100 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(body)
	}
	if !strings.Contains(page, "served-lease") {
		t.Fatalf("page never showed the lease:\n%s", page)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	p.cmd.Process.Signal(syscall.SIGINT)
	if r := p.wait(30 * time.Second); r.code != 0 {
		t.Fatalf("serve after SIGINT: %v", r)
	}
	hold.wait(time.Minute)
}
