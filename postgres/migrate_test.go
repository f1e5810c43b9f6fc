package postgres

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fence/internal/testdb"
)

func TestNewValidatesPrefix(t *testing.T) {
	db := &sql.DB{} // never used: New must refuse before touching it
	for _, p := range []string{"1abc", "a-b", "a b", "x;drop table y", strings.Repeat("a", 42), "ä"} {
		if _, err := New(db, p); err == nil || !strings.Contains(err.Error(), "prefix") {
			t.Errorf("New(%q) = %v, want a prefix error", p, err)
		}
	}
	for _, p := range []string{"_", "fence_", "A9_", strings.Repeat("a", 41)} {
		if _, err := New(db, p); err != nil {
			t.Errorf("New(%q): %v", p, err)
		}
	}
	// "" is the default prefix, so that New(db, "") is the common call.
	if d, err := New(db, ""); err != nil || d.Prefix() != "fence_" {
		t.Errorf("New(\"\") = prefix %q, %v; want fence_", d.Prefix(), err)
	}
	if _, err := New(nil, "fence_"); err == nil {
		t.Error("New(nil) succeeded")
	}
}

func TestStatementsAreRendered(t *testing.T) {
	q, err := loadStatements("pfx_")
	if err != nil {
		t.Fatal(err)
	}
	all := []string{q.acquire, q.acquireNew, q.acquireUpdate, q.renew, q.renewLocked, q.renewBatch, q.release, q.releaseLocked, q.isHeld, q.get, q.list, q.revoke,
		q.now, q.lockTx, q.runStart, q.runFinish, q.runMarkLost, q.runSweep, q.runPrune, q.runGet, q.runList,
		q.schemaLock, q.schemaCreate, q.schemaVersion, q.schemaRecord, q.dropTables, q.guard(7)}
	for _, m := range q.migrations {
		all = append(all, m.SQL)
	}
	for _, s := range all {
		if s == "" || strings.Contains(s, "{{") || strings.Contains(s, "now()") {
			t.Errorf("badly rendered statement:\n%s", s)
		}
	}
	if !strings.Contains(q.runFinish, "FOR SHARE OF fence_l") || !strings.Contains(q.runStart, "FOR SHARE OF fence_l") {
		t.Error("run start/finish are not guarded by the share-locked predicate")
	}
	if _, err := expand("SELECT {{prefx}}leases", "p_", ""); err == nil {
		t.Error("a misspelt macro was accepted")
	}
}

func TestGuardSQLShape(t *testing.T) {
	d, err := New(&sql.DB{}, "pfx_")
	if err != nil {
		t.Fatal(err)
	}
	if d.Placeholder() != "$" || d.Dialect() != "postgres" {
		t.Fatalf("Placeholder %q Dialect %q", d.Placeholder(), d.Dialect())
	}
	pred, args := d.GuardSQL(tokenParams("job", "o", 7), 3)
	for _, want := range []string{
		"EXISTS (SELECT 1 FROM pfx_leases AS fence_l",
		"fence_l.lease_name = $3::text", "fence_l.owner_token = $4::text", "fence_l.fence_token = $5::bigint",
		"fence_l.leased_until_ms > (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint",
		"FOR SHARE OF fence_l)",
	} {
		if !strings.Contains(pred, want) {
			t.Errorf("guard %q lacks %q", pred, want)
		}
	}
	if strings.Contains(pred, "$6") || strings.Contains(pred, "$2") || strings.Contains(pred, "\n") || strings.Contains(pred, "KEY SHARE") {
		t.Errorf("guard %q", pred)
	}
	if len(args) != 3 || args[0] != "job" || args[1] != "o" || args[2] != int64(7) {
		t.Errorf("args %#v", args)
	}
	// Rendered once per numbering, the same text as rendering it each time,
	// also past the memo.
	for first := 1; first <= len(d.q.guards)+8; first++ {
		if got, want := d.q.guard(first), d.q.renderGuard(first); got != want || !strings.Contains(got, "$"+strconv.Itoa(first)+"::text") {
			t.Fatalf("guard(%d) = %q, want %q", first, got, want)
		}
	}
}

func TestRenderMigrations(t *testing.T) {
	ms, err := RenderMigrations("acme_")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != "0001_init.sql" {
		t.Fatalf("migrations %+v", ms)
	}
	if !strings.Contains(ms[0].SQL, "CREATE TABLE acme_leases") || strings.Contains(ms[0].SQL, "{{") {
		t.Errorf("0001 not rendered:\n%s", ms[0].SQL)
	}
	if _, err := RenderMigrations("bad-prefix"); err == nil {
		t.Error("bad prefix accepted")
	}
	// The raw files stay available for other migration tools.
	b, err := Migrations.ReadFile("migrations/0001_init.sql")
	if err != nil || !strings.Contains(string(b), "{{prefix}}leases") {
		t.Errorf("Migrations FS: %v", err)
	}
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriverPrefix(t, testdb.Prefix())
	latest := d.q.migrations[len(d.q.migrations)-1].Version
	if v, err := d.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion before Migrate = %d, %v; want 0", v, err)
	}
	for i := range 2 {
		v, err := d.Migrate(ctx)
		if err != nil || v != latest {
			t.Fatalf("Migrate #%d = %d, %v; want %d", i+1, v, err, latest)
		}
	}
	if v, err := d.SchemaVersion(ctx); err != nil || v != latest {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, latest)
	}
	var rows int
	var appliedMs int64
	if err := d.queryRowT(t, `SELECT count(*), max(applied_at_ms) FROM {{prefix}}schema`).Scan(&rows, &appliedMs); err != nil {
		t.Fatal(err)
	}
	now, err := d.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One row per migration: the versions have a gap (0005 is unused).
	if rows != len(d.q.migrations) || appliedMs <= 0 || appliedMs > now {
		t.Errorf("schema table: %d rows, applied_at_ms %d (now %d)", rows, appliedMs, now)
	}
	// Dropping and migrating again starts over.
	if err := d.DropTables(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.DropTables(ctx); err != nil {
		t.Fatalf("DropTables twice: %v", err)
	}
	if v, err := d.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion after DropTables = %d, %v", v, err)
	}
	if v, err := d.Migrate(ctx); err != nil || v != latest {
		t.Fatalf("Migrate after DropTables = %d, %v", v, err)
	}
}

// Two processes (two pools) migrating the same prefix at once: without the
// advisory lock, concurrent CREATE TABLE fails with a unique violation on the
// catalog or one of them records the version twice.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	prefix := testdb.Prefix()
	drivers := []*Driver{newDriverPrefix(t, prefix), newDriverPrefix(t, prefix)}
	latest := drivers[0].q.migrations[len(drivers[0].q.migrations)-1].Version
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			<-start
			v, err := drivers[i%2].Migrate(context.Background())
			if err == nil && v != latest {
				t.Errorf("Migrate = %d", v)
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	var rows int
	if err := drivers[0].queryRowT(t, `SELECT count(*) FROM {{prefix}}schema`).Scan(&rows); err != nil || rows != len(drivers[0].q.migrations) {
		t.Errorf("schema rows = %d, %v", rows, err)
	}
}
