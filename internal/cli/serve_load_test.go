package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// TestServeLoad is the load test of fence serve (issue 16): the real
// binary on loopback over SQLite with many leases, holding thousands of
// idle keep-alive connections while ten clients poll the way the page's
// script does, and /healthz is probed throughout. It reports the server's
// memory (VmRSS and VmHWM of its process) and the response sizes.
//
// It runs only when asked: FENCE_SERVE_LOAD=full (100,000 leases, 20,000
// idle connections or as many as RLIMIT_NOFILE allows, 15 s of polling) or
// FENCE_SERVE_LOAD=small (20,000 leases, 2,000 connections, 5 s; CI). Run
// with -v for the figures.
//
// The only timing it fails on is /healthz, generously: a failed probe, or
// a median above 1 s. The p99 is reported against the 1 s requirement.
func TestServeLoad(t *testing.T) {
	var leases, idle int
	var poll time.Duration
	switch os.Getenv("FENCE_SERVE_LOAD") {
	case "full":
		leases, idle, poll = 100_000, 20_000, 15*time.Second
	case "small":
		leases, idle, poll = 20_000, 2_000, 5*time.Second
	case "":
		t.Skip("SKIP load test: set FENCE_SERVE_LOAD=full or small")
	default:
		t.Fatalf("FENCE_SERVE_LOAD=%q: want full or small", os.Getenv("FENCE_SERVE_LOAD"))
	}
	// Both ends of a loopback connection take a descriptor, the server's in
	// its own process: each side needs idle + a few. Go raises the soft
	// limit to the hard one at start; the hard one is the machine's.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	const spare = 64 // pollers, probe, database, listener, pipes
	if int(lim.Cur)-spare < idle {
		t.Logf("RLIMIT_NOFILE is %d (hard %d) here: holding %d idle connections, not %d (each process needs one descriptor per connection plus %d spare; raising the hard limit needs CAP_SYS_RESOURCE)",
			lim.Cur, lim.Max, int(lim.Cur)-spare, idle, spare)
		idle = int(lim.Cur) - spare
	}

	b := sqliteOnly(t)
	ctx := context.Background()
	s, err := fencedsn.Open(ctx, b.dsn, fence.WithPrefix(b.prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	began := time.Now()
	insertLeases(t, s, leases)
	t.Logf("inserted %d leases in %v", leases, time.Since(began).Round(time.Millisecond))
	// A lease the writer changes now and then, first by name so that it is
	// on the page the pollers refresh; and some runs for /api/runs.
	live, err := s.Acquire(ctx, "a-live", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for range 60 {
		l, err := s.Acquire(ctx, "a-job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.StartRun(ctx, l.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(ctx, l.Token, id, fence.Completion{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l.Token); err != nil {
			t.Fatal(err)
		}
	}

	// The server holds every idle connection for the whole test: a cap
	// above them and an idle timeout beyond the test. With
	// FENCE_SERVE_LOAD_CAP=default it runs with its default cap (512)
	// instead, closing the longest-idle connection to make room.
	args := []string{"serve", "--addr", "127.0.0.1:0", "--idle-timeout", "10m"}
	if os.Getenv("FENCE_SERVE_LOAD_CAP") != "default" {
		args = append(args, "--max-conns", strconv.Itoa(idle+spare/2))
	}
	srv := b.start(t, args...)
	srv.waitStderr("Ctrl-C stops", 30*time.Second)
	m := regexp.MustCompile(`http://([0-9.:]+)/`).FindStringSubmatch(srv.errb.String())
	if m == nil {
		t.Fatalf("no address in fence serve's output:\n%s", srv.errb.String())
	}
	addr := m[1]
	pid := srv.cmd.Process.Pid
	base := "http://" + addr

	sizes := map[string]int{}
	for _, p := range []string{"/", "/api/leases", "/api/leases?limit=500", "/api/runs", "/api/timeline"} {
		code, n, _ := fetch(t, http.DefaultClient, base+p, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d", p, code)
		}
		sizes[p] = n
	}
	rss0, _ := memory(t, pid)

	// The prober runs from here to the end.
	probe := &prober{}
	stopProbe := make(chan struct{})
	var probeDone sync.WaitGroup
	probeDone.Add(1)
	go func() { defer probeDone.Done(); probe.run(base+"/healthz", stopProbe) }()

	began = time.Now()
	conns, failed := holdIdle(addr, idle)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	t.Logf("opened %d idle keep-alive connections (%d failed) in %v", len(conns), failed, time.Since(began).Round(time.Millisecond))
	rss1, _ := memory(t, pid)

	// Ten pollers refresh like the page: leases and runs every second with
	// the last ETag, the timeline when runs changed. The writer changes the
	// live lease every 3 s, so some refreshes are 200s.
	var st pollStats
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() { defer wg.Done(); st.poll(t, base, stop) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := s.Renew(ctx, live.Token, time.Hour); err != nil {
					t.Errorf("renewing the live lease: %v", err)
					return
				}
			}
		}
	}()
	var peak int64
	deadline := time.Now().Add(poll)
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond) // the sampling period of the memory readings
		if r, _ := memory(t, pid); r > peak {
			peak = r
		}
	}
	close(stop)
	wg.Wait()
	close(stopProbe)
	probeDone.Wait()
	rss2, hwm := memory(t, pid)

	// Spot check: idle connections the server still holds answer.
	answered := 0
	for i := 0; i < len(conns) && i < 100; i++ {
		c := conns[i*len(conns)/min(len(conns), 100)]
		if oneRequest(c) == nil {
			answered++
		}
	}

	lat := probe.latencies()
	t.Logf("fence serve, %d leases on SQLite, %d idle keep-alive connections, 10 pollers for %v:", leases, len(conns), poll)
	t.Logf("  server VmRSS: %s after start, %s with the idle connections, %s at the end, peak sampled %s, VmHWM %s",
		mib(rss0), mib(rss1), mib(rss2), mib(peak), mib(hwm))
	t.Logf("  response bodies: page %d B, /api/leases %d B, /api/leases?limit=500 %d B, /api/runs %d B, /api/timeline %d B; unchanged refresh 304 with 0 B",
		sizes["/"], sizes["/api/leases"], sizes["/api/leases?limit=500"], sizes["/api/runs"], sizes["/api/timeline"])
	t.Logf("  polls: %d requests, %d × 200 (%d B in all), %d × 304, %d × 503, %d errors",
		st.requests.Load(), st.ok.Load(), st.bytes.Load(), st.notModified.Load(), st.busy.Load(), st.errors.Load())
	t.Logf("  /healthz: %d probes, %d failed; p50 %v, p99 %v, max %v (requirement: within 1s)",
		len(lat), probe.failed.Load(), pct(lat, 50), pct(lat, 99), pct(lat, 100))
	t.Logf("  idle connections still served a request afterwards: %d of %d tried", answered, min(len(conns), 100))

	if n := probe.failed.Load(); n > 0 {
		t.Errorf("/healthz failed %d times", n)
	}
	if len(lat) == 0 || pct(lat, 50) > time.Second {
		t.Errorf("/healthz median %v: the server is not answering within 1s", pct(lat, 50))
	}
	if p := pct(lat, 99); p > time.Second {
		t.Logf("NOTE: /healthz p99 %v is above 1s (the machine's load average: %s)", p, loadavg())
	}
	if st.errors.Load() > 0 {
		t.Errorf("%d polls failed", st.errors.Load())
	}
	if len(conns) < idle*9/10 {
		t.Errorf("held %d idle connections, want at least %d", len(conns), idle*9/10)
	}
}

// insertLeases fills the store with n leases through one transaction: a
// third held for an hour, a third expired, a third released.
func insertLeases(t *testing.T, s *fence.Store, n int) {
	t.Helper()
	q, err := os.ReadFile("testdata/load_lease_insert.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms := now.UnixMilli()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, strings.ReplaceAll(string(q), "{{prefix}}", s.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	var owner [16]byte
	for i := range n {
		rand.Read(owner[:])
		state, until := "held", ms+3_600_000
		switch i % 3 {
		case 1:
			until = ms - 60_000 // expired: held, but past its time
		case 2:
			state, until = "released", 0
		}
		if _, err := st.ExecContext(ctx, fmt.Sprintf("lease-%06d", i), hex.EncodeToString(owner[:]), ms*1000+int64(i), state, until, ms); err != nil {
			t.Fatalf("inserting lease %d: %v", i, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// holdIdle opens n connections to addr, 64 at a time, sends each one
// request and keeps it open: an idle keep-alive connection.
func holdIdle(addr string, n int) ([]net.Conn, int) {
	var mu sync.Mutex
	var conns []net.Conn
	var failed atomic.Int64
	next := make(chan struct{})
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				c, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				// 64 dialers and the prober can exceed the server's 32
				// requests at once: a 503 is retried on the same connection.
				err = oneRequest(c)
				for try := 0; errors.Is(err, errBusy) && try < 20; try++ {
					err = oneRequest(c)
				}
				if err != nil {
					c.Close()
					failed.Add(1)
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return conns, int(failed.Load())
}

// oneRequest sends a request on c and reads the whole answer, leaving c
// open for more. It asks for a path the server does not have: the 404 is
// a whole request and response through every layer of the server (Host
// check, caps, timeouts) without a database read, so that opening the
// connections measures the server and not SQLite.
func oneRequest(c net.Conn) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /idle HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil
	case http.StatusServiceUnavailable:
		return errBusy
	}
	return fmt.Errorf("GET /idle: %s, want 404", resp.Status)
}

var errBusy = errors.New("503: busy")

type pollStats struct {
	requests, ok, notModified, busy, errors, bytes atomic.Int64
}

// poll refreshes like the page's script until stop: both endpoints every
// second with their last ETags, the timeline when the runs changed.
func (p *pollStats) poll(t *testing.T, base string, stop chan struct{}) {
	c := &http.Client{Timeout: 10 * time.Second}
	etags := map[string]string{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for _, u := range []string{"/api/leases?limit=50", "/api/runs?limit=50"} {
			code, n, etag := fetch(t, c, base+u, etags[u])
			p.count(code, n)
			if code == http.StatusOK {
				etags[u] = etag
				if strings.HasPrefix(u, "/api/runs") {
					code, n, _ := fetch(t, c, base+"/api/timeline?limit=50", "")
					p.count(code, n)
				}
			}
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

func (p *pollStats) count(code, n int) {
	p.requests.Add(1)
	switch code {
	case http.StatusOK:
		p.ok.Add(1)
		p.bytes.Add(int64(n))
	case http.StatusNotModified:
		p.notModified.Add(1)
	case http.StatusServiceUnavailable:
		p.busy.Add(1)
	default:
		p.errors.Add(1)
	}
}

// fetch GETs u (with If-None-Match when etag is set) and returns the
// status (0 on a transport error), the body's size and the ETag.
func fetch(t *testing.T, c *http.Client, u, etag string) (int, int, string) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Error(err)
		return 0, 0, ""
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, ""
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, int(n), resp.Header.Get("ETag")
}

// prober GETs /healthz every 100 ms on a keep-alive connection of its own.
type prober struct {
	mu     sync.Mutex
	lat    []time.Duration
	failed atomic.Int64
}

func (p *prober) run(u string, stop chan struct{}) {
	c := &http.Client{Timeout: 10 * time.Second}
	for {
		began := time.Now()
		resp, err := c.Get(u)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		d := time.Since(began)
		if err != nil || resp.StatusCode != http.StatusOK {
			p.failed.Add(1)
		}
		p.mu.Lock()
		p.lat = append(p.lat, d)
		p.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *prober) latencies() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := slices.Clone(p.lat)
	slices.Sort(l)
	return l
}

// pct is the q-th percentile of sorted latencies.
func pct(l []time.Duration, q int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, len(l)*q/100)].Round(time.Millisecond)
}

// memory reads VmRSS and VmHWM of process pid, in bytes.
func memory(t *testing.T, pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Logf("reading the server's memory: %v", err)
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				rss = v << 10
			case "VmHWM:":
				hwm = v << 10
			}
		}
	}
	return rss, hwm
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
