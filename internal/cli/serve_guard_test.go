package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A non-loopback bind without a token is refused before the database is
// touched, with a message that says what to do; the old serve started on
// 0.0.0.0 with no protection, as its --help suggested.
func TestServeRefusesOpenBindWithoutToken(t *testing.T) {
	dir := t.TempDir()
	env := []string{"FENCE_DSN=sqlite:" + filepath.Join(dir, "f.db")}
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		code, _, errs := mainIn(t, env, "", "serve", "--addr", addr)
		if code != ExitUsage || !strings.Contains(errs, "not a loopback address") || !strings.Contains(errs, "FENCE_SERVE_TOKEN") {
			t.Errorf("serve --addr %s without a token: %d %s", addr, code, errs)
		}
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if code, _, errs := mainIn(t, env, "", "serve", "--addr", "0.0.0.0:0", "--token-file", short); code != ExitUsage || !strings.Contains(errs, "at least 16") {
		t.Errorf("a 3-character token: %d %s", code, errs)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if code, _, errs := mainIn(t, env, "", "serve", "--addr", "0.0.0.0:0", "--token-file", empty); code != ExitUsage || !strings.Contains(errs, "is empty") {
		t.Errorf("an empty token file: %d %s", code, errs)
	}
	if code, _, errs := mainIn(t, env, "", "serve", "--addr", "0.0.0.0:0", "--token-file", filepath.Join(dir, "missing")); code != ExitUsage || !strings.Contains(errs, "--token-file") {
		t.Errorf("a missing token file: %d %s", code, errs)
	}
	code, out, _ := mainIn(t, nil, "", "serve", "--help")
	if code != 0 || !strings.Contains(out, "0.0.0.0") || !strings.Contains(out, "--token-file") || !strings.Contains(out, "needs a bearer token") {
		t.Errorf("serve --help does not say that 0.0.0.0 needs a token:\n%s", out)
	}
}

// serveInProcess runs `fence serve args...` until the test ends and
// returns its address once /healthz answers.
func serveInProcess(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, append([]string{"serve", "--addr", addr}, args...), strings.NewReader(""), io.Discard, &errb, env)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not stop")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return addr
			}
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never answered /healthz: %v %s", err, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getStatus(t *testing.T, addr, host, path, auth string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	req.Host = host
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// fence serve on loopback answers its own names only (DNS rebinding), and
// with a low --max-conns a crowd of idle keep-alive connections does not
// lock /healthz out. Bounded: 2×150 connections, all on loopback, closed
// when the test ends.
func TestServeGuarded(t *testing.T) {
	env := []string{"FENCE_DSN=sqlite:" + filepath.Join(t.TempDir(), "f.db")}
	if code, _, errs := mainIn(t, env, "", "migrate"); code != 0 {
		t.Fatal(errs)
	}
	addr := serveInProcess(t, env, "--max-conns", "8")
	_, port, _ := net.SplitHostPort(addr)
	for host, want := range map[string]int{
		"attacker.example:" + port: http.StatusMisdirectedRequest,
		"localhost:" + port:        http.StatusOK,
		addr:                       http.StatusOK,
	} {
		if got := getStatus(t, addr, host, "/api/leases", ""); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 300 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close()
			}
		}
	}
	start := time.Now()
	if got := getStatus(t, addr, addr, "/healthz", ""); got != http.StatusOK {
		t.Errorf("healthz after 300 idle connections: %d", got)
	}
	t.Logf("healthz answered in %v after 300 idle connections against --max-conns 8", time.Since(start))
}

// With a token, the page needs it; /healthz does not.
func TestServeToken(t *testing.T) {
	dir := t.TempDir()
	env := []string{"FENCE_DSN=sqlite:" + filepath.Join(dir, "f.db"), "FENCE_SERVE_TOKEN=0123456789abcdef0123456789abcdef"}
	if code, _, errs := mainIn(t, env, "", "migrate"); code != 0 {
		t.Fatal(errs)
	}
	addr := serveInProcess(t, env)
	if got := getStatus(t, addr, addr, "/api/leases", ""); got != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", got)
	}
	if got := getStatus(t, addr, addr, "/api/leases", "Bearer 0123456789abcdef0123456789abcdef"); got != http.StatusOK {
		t.Errorf("the token: %d, want 200", got)
	}
}

// The server's timeouts and caps are all set.
func TestNewServerBounds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, _, err := newServer(http.NotFoundHandler(), ln, ln.Addr().String(), "", defaultServeLimits, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 5*time.Second || srv.IdleTimeout <= 0 || srv.ConnState == nil || srv.MaxHeaderBytes <= 0 {
		t.Errorf("server bounds: header %v read %v write %v idle %v connstate %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.ConnState != nil)
	}
}
