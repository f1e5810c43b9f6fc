package cli

import (
	"context"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
)

// tcpProxy forwards connections to a database until cut, when it closes
// every connection and stops listening: the database becomes unreachable.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, s); s.Close(); c.Close() }()
	}
}

func (p *tcpProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// When the database becomes unreachable mid-run, fence run can no longer
// prove that it holds the lease: it must stop its command, which here
// ignores SIGTERM, by SIGKILL before the lease could lapse by the
// database's clock, and exit 76.
func TestRunStopsCommandWhenDatabaseUnreachable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		if b.name == "sqlite" {
			t.Skip("no network between fence and SQLite")
		}
		u, err := url.Parse(b.dsn)
		if err != nil {
			t.Fatal(err)
		}
		p := startProxy(t, u.Host)
		direct := b.dsn
		u.Host = p.ln.Addr().String()
		b = &backend{name: b.name, dsn: u.String(), prefix: b.prefix, dir: b.dir}

		started := filepath.Join(b.dir, "started")
		ticks := filepath.Join(b.dir, "ticks")
		script := `exec 2>/dev/null; trap '' TERM; touch ` + started +
			`; while :; do date +%s%N >> ` + ticks + `; sleep 0.05; done`
		a := b.start(t, "run", "--lease", "outage", "--ttl", "3s", "--grace", "60s", "--", "sh", "-c", script)
		waitFile(t, started, 30*time.Second)
		time.Sleep(1500 * time.Millisecond) // a renewal or two
		cut := time.Now()
		p.cut()

		r := a.wait(time.Minute)
		if r.code != ExitLost {
			t.Fatalf("want exit 76 when the database is unreachable: %v", r)
		}
		if took := time.Since(cut); took > 20*time.Second {
			t.Errorf("took %v to stop: --grace 60s must be capped by the 3s TTL", took)
		}
		// go-sql-driver/mysql logs dropped connections to stderr on its own
		// ("[mysql] … closing bad idle connection"); the mysql package does
		// not route that logger yet. Everything else must be fence's one line.
		r.stderr = dropLines(r.stderr, "[mysql] ")
		oneErrorLine(t, r, "lease outage fence ")
		if !regexp.MustCompile(`lease outage fence [1-9][0-9]* could not be renewed within 2\.0s`).MatchString(r.stderr) {
			t.Errorf("the loss should name the fence and the renewal deadline: %s", r.stderr)
		}
		if !strings.Contains(r.stderr, "SIGKILL") {
			t.Errorf("the command ignores SIGTERM and must have been killed: %s", r.stderr)
		}

		// The command's last sign of life came before the lease's expiry as
		// the database recorded it. Both clocks are this machine's when the
		// database is local.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := fencedsn.Open(ctx, direct, fence.WithPrefix(b.prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l, err := s.Get(ctx, "outage")
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(ticks)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Fields(string(data))
		last, _ := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		lastTick := time.Unix(0, last)
		if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" && !testdb.Required() {
			t.Logf("database %s is not local: not comparing clocks", h)
			return
		}
		if !lastTick.Before(l.ExpiresAt) {
			t.Errorf("the command was alive at %v, after its lease expired at %v", lastTick.Format(time.RFC3339Nano), l.ExpiresAt.Format(time.RFC3339Nano))
		} else {
			t.Logf("command's last tick %v before the lease's expiry", l.ExpiresAt.Sub(lastTick).Round(time.Millisecond))
		}
	})
}

func dropLines(s, prefix string) string {
	var keep []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(l, prefix) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}
