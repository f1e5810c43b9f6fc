package fencedsn

import (
	"context"
	"github.com/fencekit/fence"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence/internal/dsnurl"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/postgres"
)

// A PostgreSQL primary with a standby and automatic failover is reached with
// a multi-host DSN (docs/CLUSTERS.md): libpq's host list, which pgx follows,
// and target_session_attrs=read-write so that a connection lands on
// whichever server is primary now.
const multiHostDSN = "postgres://fence:s3cr3t@127.0.0.1:5441,127.0.0.1:5442/app?sslmode=disable&target_session_attrs=read-write"

func TestParseDSNMultiHost(t *testing.T) {
	d, err := Parse(multiHostDSN)
	if err != nil {
		t.Fatalf("Parse(multi-host): %v", err)
	}
	if d.Dialect != fence.Postgres {
		t.Errorf("dialect %q, want postgres", d.Dialect)
	}
	want := "postgres://fence:xxxxx@127.0.0.1:5441,127.0.0.1:5442/app?sslmode=disable&target_session_attrs=read-write"
	if d.Redacted != want {
		t.Errorf("Redacted = %q, want %q (both hosts, the password hidden)", d.Redacted, want)
	}
	if strings.Contains(d.Redacted, "s3cr3t") {
		t.Errorf("Redacted shows the password: %q", d.Redacted)
	}
	// pgx must read the same host list: the clients' failover depends on it.
	pc, err := postgres.NewPoolConfig(multiHostDSN)
	if err != nil {
		t.Fatalf("postgres.NewPoolConfig(multi-host): %v", err)
	}
	cc := pc.ConnConfig
	hosts := []string{cc.Host + ":" + strconv.Itoa(int(cc.Port))}
	for _, fb := range cc.Fallbacks {
		hosts = append(hosts, fb.Host+":"+strconv.Itoa(int(fb.Port)))
	}
	if got := strings.Join(hosts, ","); got != "127.0.0.1:5441,127.0.0.1:5442" {
		t.Errorf("pgx hosts %s, want 127.0.0.1:5441,127.0.0.1:5442", got)
	}
	if cc.ValidateConnect == nil {
		t.Error("pgx has no ValidateConnect: target_session_attrs=read-write was not taken")
	}
}

// multiHostTestDSN is the test server's DSN with a dead host in front of it
// (127.0.0.1:1 refuses connections) and target_session_attrs=read-write: a
// failed-over primary as the clients see it.
func multiHostTestDSN(t *testing.T) string {
	t.Helper()
	base := testdb.PostgresDSN()
	u, err := dsnurl.Parse(base)
	if err != nil {
		t.Fatalf("FENCE_TEST_POSTGRES: %v", err)
	}
	var b strings.Builder
	b.WriteString("postgres://")
	if u.HasUserinfo {
		if u.HasPassword {
			b.WriteString(url.UserPassword(u.User, u.Password).String())
		} else {
			b.WriteString(url.User(u.User).String())
		}
		b.WriteString("@")
	}
	b.WriteString("127.0.0.1:1")
	for _, h := range u.Hosts {
		b.WriteString("," + h.Host)
		if h.Port != "" {
			b.WriteString(":" + h.Port)
		}
	}
	b.WriteString("/" + url.PathEscape(u.DBName) + "?")
	for _, p := range u.Params {
		if p.Key != "target_session_attrs" {
			b.WriteString(url.QueryEscape(p.Key) + "=" + url.QueryEscape(p.Value) + "&")
		}
	}
	b.WriteString("target_session_attrs=read-write")
	return b.String()
}

// openMultiHost opens a store on dsn, the one place this file opens a
// store from a DSN.
func openMultiHost(ctx context.Context, dsn string, opts ...fence.Option) (*fence.Store, error) {
	return Open(ctx, dsn, opts...)
}

// The store opens through the host list, passes its session checks on the
// primary it found and fences as usual, on database/sql and on a pgx pool.
func TestOpenMultiHostDSN(t *testing.T) {
	reachable(t, fence.Postgres)
	ctx := ctxOpen(t)
	dsn := multiHostTestDSN(t)
	check := func(t *testing.T, s *fence.Store) {
		t.Helper()
		if _, err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		l, err := s.Acquire(ctx, "multi-host", time.Minute)
		if err != nil {
			t.Fatalf("Acquire through the multi-host DSN: %v", err)
		}
		if ok, err := s.IsHeld(ctx, l.Token); err != nil || !ok {
			t.Fatalf("IsHeld = %v, %v; want true", ok, err)
		}
		if err := s.Release(ctx, l.Token); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	t.Run("database/sql", func(t *testing.T) {
		prefix := testdb.Prefix()
		s, err := openMultiHost(ctx, dsn, fence.WithPrefix(prefix))
		if err != nil {
			t.Fatalf("Open(multi-host DSN, first host down): %v", err)
		}
		defer s.Close()
		defer s.DropTables(context.WithoutCancel(ctx))
		check(t, s)
	})
	t.Run("pgx", func(t *testing.T) {
		pc, err := postgres.NewPoolConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		s, err := newPoolStore(ctx, pool, fence.WithPrefix(testdb.Prefix()))
		if err != nil {
			t.Fatalf("OpenPool(multi-host pool, first host down): %v", err)
		}
		defer s.Close()
		defer s.DropTables(context.WithoutCancel(ctx))
		check(t, s)
	})
}

func newPoolStore(ctx context.Context, pool *pgxpool.Pool, opts ...fence.Option) (*fence.Store, error) {
	d, err := postgres.NewPool(pool, "")
	if err != nil {
		return nil, err
	}
	return fence.New(ctx, d, opts...)
}
