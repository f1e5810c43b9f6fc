package postgres

import (
	"context"
	"strings"
	"testing"
)

func TestFencedSQLPolicy(t *testing.T) {
	for _, c := range []struct {
		v       int
		refusal string
	}{
		{150010, ""}, {130000, ""}, {180001, ""},
		{120022, "need PostgreSQL 13"},
		{90624, "need PostgreSQL 13"},
		{190000, "tested up to PostgreSQL 18"},
	} {
		got := fencedSQLPolicy(c.v)
		if c.refusal == "" && got != "" || c.refusal != "" && !strings.Contains(got, c.refusal) {
			t.Errorf("%d: %q, want %q", c.v, got, c.refusal)
		}
	}
}

// TestLexingByVersion asks this server how it reads the number spellings
// whose reading changed between PostgreSQL majors (15: junk after a number
// is an error where 14 read 1.0OR as 1.0 OR; 16: 0x1F, 1_000 are numbers
// where 15 refuses them as trailing junk and 14 reads 0 then the name x1F), so the test records which reading
// this version has; fence refuses every one of them on any version
// (sqlrewrite_test's glued cases), which is why the range in version.go
// can hold versions CI does not run.
func TestLexingByVersion(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	var v int
	if err := db.QueryRowContext(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if p := fencedSQLPolicy(v); p != "" {
		t.Fatalf("the tested server %d is refused: %s", v, p)
	}
	var n int64
	err := db.QueryRowContext(ctx, "SELECT 0x1F").Scan(&n)
	switch {
	case v >= 160000 && (err != nil || n != 31):
		t.Errorf("PostgreSQL %d: SELECT 0x1F = %d, %v; want 31", v, n, err)
	case v >= 150000 && v < 160000 && err == nil:
		t.Errorf("PostgreSQL %d: SELECT 0x1F = %d; want trailing junk refused", v, n)
	}
	err = db.QueryRowContext(ctx, "SELECT 1.0OR false").Scan(new(any))
	if v >= 150000 && err == nil {
		t.Errorf("PostgreSQL %d read 1.0OR without an error", v)
	}
	if v < 150000 && err != nil {
		t.Errorf("PostgreSQL %d: 1.0OR: %v", v, err)
	}
}
