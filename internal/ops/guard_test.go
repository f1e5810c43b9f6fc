package ops_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
)

// Nothing the handler serves carries a full owner token: with the token
// and the fence anyone could renew, release or write as the holder. The
// old handler served it in /api/leases, /api/runs and a title attribute.
func TestNoOwnerTokenServed(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		f := populate(t, s)
		var owners []string
		ls, err := s.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			owners = append(owners, l.Owner)
		}
		rs, err := s.Runs(context.Background(), fence.RunFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			owners = append(owners, r.Owner)
		}
		owners = append(owners, f.job.Token.Owner)
		srv := httptest.NewServer(ops.Handler(s))
		defer srv.Close()
		for _, p := range []string{"/", "/api/leases", "/api/runs"} {
			resp, body := get(t, srv.URL+p)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s = %s", p, resp.Status)
			}
			for _, o := range owners {
				if len(o) <= 8 {
					t.Fatalf("owner token %q is too short to test with", o)
				}
				// 9 characters: more than the short form, far less than a token.
				if strings.Contains(body, o[:9]) {
					t.Errorf("GET %s serves more than 8 characters of owner token %s…", p, o[:8])
				}
			}
			if p != "/" && !strings.Contains(body, f.job.Token.Owner[:8]) {
				t.Errorf("GET %s lacks the holder's short form %s", p, f.job.Token.Owner[:8])
			}
			if !strings.Contains(body, s.Holder()) {
				t.Errorf("GET %s lacks the holder's name %s", p, s.Holder())
			}
		}
	})
}

// logBuffer is a slog handler's output, safe for the server's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// proxy forwards 127.0.0.1:random to target until stop, which also cuts
// every connection it carried.
func proxy(t *testing.T, target string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// A database that stops answering shows as "database unavailable" and
// nothing more: the driver's text names the database user, host and port
// (pgx: "failed to connect to `user=postgres database=test`: 127.0.0.1:…"),
// which the old handler served on /healthz, the API and the page. The
// detail goes to the log.
func TestErrorsAreGeneric(t *testing.T) {
	u, err := url.Parse(testdb.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", u.Host, 5*time.Second); err != nil {
		testdb.Unreachable(t, "PostgreSQL", "FENCE_TEST_POSTGRES", err)
	} else {
		c.Close()
	}
	addr, stop := proxy(t, u.Host)
	_, port, _ := net.SplitHostPort(addr)
	u.Host = addr
	s, err := fencedsn.Open(context.Background(), u.String(), fence.WithPrefix(testdb.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var log logBuffer
	srv := httptest.NewServer(ops.Handler(s, ops.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
	defer srv.Close()
	if resp, body := get(t, srv.URL+"/healthz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz through the proxy = %s %q", resp.Status, body)
	}
	stop()

	secrets := []string{u.User.Username(), port, "127.0.0.1", "dial", "pgx", "connect"}
	for _, p := range []string{"/healthz", "/api/leases", "/api/runs", "/"} {
		resp, body := get(t, srv.URL+p)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "database unavailable") {
			t.Errorf("GET %s with the database gone = %s, want 503 database unavailable:\n%.400s", p, resp.Status, body)
		}
		if p == "/" { // the CSP says connect-src: look at the error box only
			_, box, _ := strings.Cut(body, `<p class="error" id="error">`)
			body, _, _ = strings.Cut(box, "</p>")
		}
		for _, sec := range secrets {
			if strings.Contains(body, sec) {
				t.Errorf("GET %s shows %q of the driver's error:\n%.400s", p, sec, body)
			}
		}
	}
	if l := log.String(); !strings.Contains(l, port) {
		t.Errorf("the log lacks the error's detail (port %s):\n%s", port, l)
	}
}

func status(t *testing.T, h http.Handler, host, path string, hdr ...string) int {
	t.Helper()
	r := httptest.NewRequest("GET", "http://"+host+path, nil)
	r.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// DNS rebinding: a page on attacker.example re-points its name at
// 127.0.0.1 and reads the server through the victim's browser, which still
// sends "Host: attacker.example". A loopback bind answers only its own
// names; any other bind needs the token.
func TestGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	g, err := ops.Guard(ok, "127.0.0.1:8080", "")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]int{
		"attacker.example:8080": http.StatusMisdirectedRequest,
		"attacker.example":      http.StatusMisdirectedRequest,
		"127.0.0.2:8080":        http.StatusMisdirectedRequest,
		"localhost.attacker.io": http.StatusMisdirectedRequest,
		"":                      http.StatusMisdirectedRequest,
		"localhost:8080":        http.StatusOK,
		"LOCALHOST:8080":        http.StatusOK,
		"127.0.0.1:8080":        http.StatusOK,
		"127.0.0.1":             http.StatusOK,
		"[::1]:8080":            http.StatusOK,
	} {
		if got := status(t, g, host, "/api/leases"); got != want {
			t.Errorf("Host %q: %d, want %d", host, got, want)
		}
	}
	if g6, err := ops.Guard(ok, "[::1]:9000", ""); err != nil || status(t, g6, "[::1]:9000", "/") != http.StatusOK || status(t, g6, "evil:9000", "/") != http.StatusMisdirectedRequest {
		t.Errorf("[::1] bind: %v", err)
	}

	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.168.1.10:8080", "[::]:8080", "example.com:8080"} {
		if _, err := ops.Guard(ok, addr, ""); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "token") {
			t.Errorf("Guard(%s) without a token: %v, want ErrInvalid naming the token", addr, err)
		}
	}
	if _, err := ops.Guard(ok, "0.0.0.0:8080", "short"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("a 5-character token: %v, want ErrInvalid", err)
	}

	const token = "0123456789abcdef0123456789abcdef"
	for _, addr := range []string{"0.0.0.0:8080", "127.0.0.1:8080"} {
		g, err := ops.Guard(ok, addr, token)
		if err != nil {
			t.Fatal(err)
		}
		host := "127.0.0.1:8080"
		for _, c := range []struct {
			path string
			hdr  []string
			want int
		}{
			{"/api/leases", nil, http.StatusUnauthorized},
			{"/", []string{"Authorization", "Bearer " + token[:31]}, http.StatusUnauthorized},
			{"/", []string{"Authorization", "Bearer " + token + "x"}, http.StatusUnauthorized},
			{"/", []string{"Authorization", token}, http.StatusUnauthorized},
			{"/", []string{"Authorization", "Bearer " + token}, http.StatusOK},
			{"/api/runs", []string{"Authorization", "bearer " + token}, http.StatusOK},
			{"/metrics", []string{"Authorization", basic("any", token)}, http.StatusOK},
			{"/metrics", []string{"Authorization", basic(token, "x")}, http.StatusUnauthorized},
			{"/healthz", nil, http.StatusOK},
		} {
			if got := status(t, g, host, c.path, c.hdr...); got != c.want {
				t.Errorf("%s: %s %v: %d, want %d", addr, c.path, c.hdr, got, c.want)
			}
		}
	}
	// A non-loopback bind with its token answers any Host: the token, not
	// the name, is what a rebinding page cannot send.
	g, _ = ops.Guard(ok, "0.0.0.0:8080", token)
	if got := status(t, g, "fence.internal:8080", "/", "Authorization", "Bearer "+token); got != http.StatusOK {
		t.Errorf("0.0.0.0 bind, Host fence.internal: %d", got)
	}
}

func basic(user, pw string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pw)
	return r.Header.Get("Authorization")
}

func TestLimitRequests(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := ops.LimitRequests(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}), 2)
	done := make(chan int, 2)
	for range 2 {
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			done <- w.Code
		}()
		<-entered
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a third request at once: %d %v, want 503 with Retry-After", w.Code, w.Header())
	}
	close(release)
	for range 2 {
		if c := <-done; c != http.StatusOK {
			t.Errorf("a request within the cap: %d", c)
		}
	}
	go func() { <-entered }()
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusOK {
		t.Errorf("after the others finished: %d", w.Code)
	}
}

// idleFlood opens n keep-alive connections that each finish one request
// and then stay open, and n more that send nothing, and returns them.
func idleFlood(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range 2 * n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			continue
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		// The server may already have closed it to make room for a newer
		// one; either way the connection was made and its slot used.
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			resp.Body.Close()
		}
	}
	return conns
}

// With a cap of 8 connections and long idle timeouts, 200 idle keep-alive
// connections and 200 silent ones do not lock /healthz out: the
// longest-idle connection is closed to make room. A listener that stops
// accepting at the cap (netutil.LimitListener) would leave the probe
// waiting until the idle timeout.
func TestLimitConnsIdleFlood(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limited, state := ops.LimitConns(ln, 8)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }),
		// Longer than the test: only the cap's eviction can free a slot.
		ReadHeaderTimeout: 10 * time.Minute, IdleTimeout: 10 * time.Minute,
		ConnState: state,
	}
	go srv.Serve(limited)
	defer srv.Close()
	addr := ln.Addr().String()

	idleFlood(t, addr, 200)
	if n := limited.(interface{ Open() int }).Open(); n > 8 {
		t.Errorf("%d connections open under a cap of 8", n)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/healthz", nil)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("healthz after the flood: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("healthz after the flood: %s %q", resp.Status, body)
	}
	t.Logf("healthz answered in %v with 400 flood connections made against a cap of 8", time.Since(start))
}
