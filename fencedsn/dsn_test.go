package fencedsn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

func TestParse(t *testing.T) {
	for dsn, want := range map[string]fence.Dialect{
		"sqlite:fence.db":                          fence.SQLite,
		"sqlite::memory:":                          fence.SQLite,
		"sqlite:///tmp/x.db":                       fence.SQLite,
		"postgres://u:p@h:5432/db?sslmode=disable": fence.Postgres,
		"postgresql://h/db":                        fence.Postgres,
		"mysql://root@127.0.0.1:3306/test":         fence.MySQL,
	} {
		d, err := Parse(dsn)
		if err != nil || d.Dialect != want {
			t.Errorf("%q: %+v %v", dsn, d, err)
		}
	}
	for _, dsn := range []string{"", "fence.db", "oracle://x/y", "sqlite:", "mysql://h:3306", "postgres:///db", "mysql://u:p@h/db\x00", "postgres://u:p@[::1/db"} {
		if _, err := Parse(dsn); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%q: %v, want fence.ErrInvalid", dsn, err)
		}
	}
}

func TestDSNErrorsHidePassword(t *testing.T) {
	const secret = "s3cr3t-pw"
	for _, dsn := range []string{
		"postgres://u:" + secret + "@[::1/db",
		"postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=1",
		"mysql://u:" + secret + "@127.0.0.1:1/db?timeout=1s",
		"postgres://127.0.0.1:1/db?password=" + secret + "&connect_timeout=1",
	} {
		_, err := Open(context.Background(), dsn)
		if err == nil {
			t.Fatalf("%q opened", dsn)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the password: %v", err)
		}
	}
	d, _ := Parse("mysql://u:" + secret + "@h:1/db")
	if strings.Contains(d.Redacted, secret) {
		t.Errorf("redacted DSN %q", d.Redacted)
	}
	if _, err := Open(context.Background(), "postgres://u:"+secret+"@127.0.0.1:1/db?connect_timeout=1"); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("unreachable database: %v, want fence.ErrUnavailable", err)
	}
}

// Passwords with '#', '?', ':', '/', '@' and '%', written raw and
// percent-encoded, through every error path of Open on both servers: a
// refused DSN, a refused parameter, a bad driver option, an unreachable
// port, a database that does not exist, a rejected password. No error may
// show any run of the password. Before, postgres://app2:2024#Summer@… was
// printed whole and Xy7#… leaked ":Xy7" in "invalid port".
func TestOpenErrorsHideSecrets(t *testing.T) {
	my := reachable(t, fence.MySQL)
	pg := reachable(t, fence.Postgres)
	myHost := hostOf(t, my)
	pgHost := hostOf(t, pg)
	fragments := []string{"Xy7", "kLm9", "Qz5"}
	var dsns []string
	for _, pw := range []string{
		"Xy7#kLm9?Qz5:", "Xy7#kLm9", "Xy7?kLm9", "Xy7/kLm9", "Xy7@kLm9", "Xy7%kLm9", "Xy7/kLm9@Qz5",
		"Xy7%23kLm9%2FQz5%40", "1234/Xy7kLm9",
	} {
		for _, tail := range []string{
			"@127.0.0.1:1/test?connect_timeout=2&timeout=2s",
			"@" + myHost + "/nosuchdb_fence",
			"@" + pgHost + "/nosuchdb_fence?sslmode=disable",
			"@" + myHost + "/test?sql_mode=x",
			"@" + pgHost + "/test?sslmode=bogus",
			"@" + pgHost + "/test?sslmode=disable&default_transaction_read_only=on",
		} {
			dsns = append(dsns, "postgres://app:"+pw+tail, "mysql://root:"+pw+tail)
		}
		dsns = append(dsns,
			"postgres://"+pgHost+"/test?sslmode=disable&password="+pw+"&sslpassword="+pw+"&default_transaction_read_only=on",
			"mysql://root@"+myHost+"/test?password="+pw)
	}
	for _, dsn := range dsns {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := Open(ctx, dsn)
		cancel()
		if err == nil {
			s.Close()
			continue // PostgreSQL's trust authentication takes any password
		}
		if testing.Verbose() {
			t.Logf("%v", err)
		}
		for _, f := range fragments {
			if strings.Contains(err.Error(), f) {
				t.Errorf("error shows %q of the password: %v", f, err)
			}
		}
		if !errors.Is(err, fence.ErrInvalid) && !errors.Is(err, fence.ErrUnavailable) {
			t.Errorf("error is neither fence.ErrInvalid nor fence.ErrUnavailable: %v", err)
		}
	}
}

func hostOf(t *testing.T, dsn string) string {
	t.Helper()
	_, rest, _ := strings.Cut(dsn, "://")
	if i := strings.LastIndexByte(rest[:strings.IndexByte(rest, '/')], '@'); i >= 0 {
		rest = rest[i+1:]
	}
	host, _, _ := strings.Cut(rest, "/")
	return host
}

// ParseDSN reads the userinfo as pgx does, so fence and the driver agree on
// who the user and the password are; Redacted shows neither the password
// nor a secret parameter.
func TestParseDSNPasswords(t *testing.T) {
	for _, tc := range []struct{ dsn, redacted string }{
		{"postgres://app2:2024#Summer@127.0.0.1:25432/h3?sslmode=disable", "postgres://app2:xxxxx@127.0.0.1:25432/h3?sslmode=disable"},
		{"postgres://app:a?b:c@h/db", "postgres://app:xxxxx@h/db"},
		{"mysql://app:a%2Fb%40c@h:3306/db", "mysql://app:xxxxx@h:3306/db"},
		{"postgres://h/db?sslpassword=Xy7&password=Xy7&sslmode=require", "postgres://h/db?sslpassword=xxxxx&password=xxxxx&sslmode=require"},
		{"mysql://u@h/db?password=Xy7", "mysql://u@h/db?password=xxxxx"},
		{"postgres://h1:5432,h2/db", "postgres://h1:5432,h2/db"},
	} {
		d, err := Parse(tc.dsn)
		if err != nil || d.Redacted != tc.redacted {
			t.Errorf("%s: %q %v, want %q", tc.dsn, d.Redacted, err, tc.redacted)
		}
		if want := strings.Contains(tc.dsn, "Xy7") || strings.Contains(tc.dsn, ":a"); d.HasPassword != want && !strings.Contains(tc.dsn, "Summer") {
			t.Errorf("%s: HasPassword %v", tc.dsn, d.HasPassword)
		}
	}
	if d, _ := Parse("postgres://u@h/db"); d.HasPassword {
		t.Errorf("HasPassword without a password")
	}
	for _, dsn := range []string{
		"postgres://app:Xy7/kLm9@h/db", "postgres://app:Xy7@kLm9@h/db", "postgres://app:50%off@h/db",
		"postgres://app:1234/kLm9@h/db", "mysql://app:Xy7/kLm9@h:3306/db",
	} {
		_, err := Parse(dsn)
		if !errors.Is(err, fence.ErrInvalid) || strings.Contains(err.Error(), "Xy7") || strings.Contains(err.Error(), "kLm9") || strings.Contains(err.Error(), "off") {
			t.Errorf("%s: %v, want fence.ErrInvalid that quotes nothing", dsn, err)
		}
	}
}

// fence's tables go into a PostgreSQL schema through the connection's
// search_path, the way ValidatePrefix's refusal of "schema.prefix" says.
func TestSearchPathPutsTablesInASchema(t *testing.T) {
	base := reachable(t, fence.Postgres)
	ctx := ctxOpen(t)
	schema := "fence_sp_" + strings.ToLower(testdb.Prefix())
	admin, err := Open(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.DB().ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.DB().ExecContext(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE")
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	s, err := Open(ctx, base+sep+"search_path="+schema)
	if err != nil {
		t.Fatalf("Open with search_path: %v", err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "in-schema", time.Minute); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := admin.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+schema+".fence_leases WHERE lease_name = 'in-schema'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("lease row in %s.fence_leases: %d, %v", schema, n, err)
	}
}

// A libpq key=value DSN is refused without quoting any of it: before, the
// text up to its first ':' came back as an "unknown DSN scheme", and with a
// ':' in the password that text ends inside the password.
func TestKeyValueDSNRefusedUnquoted(t *testing.T) {
	const secret = "hunter2Pw"
	for _, dsn := range []string{
		"host=127.0.0.1 user=postgres password=" + secret + ":x dbname=db",
		"user=a password=" + secret + ":x host=h",
		"host=127.0.0.1 port=5432 user=postgres password=" + secret + " dbname=db",
		"password=" + secret + ":",
		"password='" + secret + " x:y' host=h",
		"x" + secret + "!://h/db",
	} {
		_, err := Parse(dsn)
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%q: %v, want fence.ErrInvalid", dsn, err)
			continue
		}
		if strings.Contains(err.Error(), secret[:4]) || strings.Contains(err.Error(), "2Pw") {
			t.Errorf("error quotes the DSN: %v", err)
		}
	}
	if _, err := Parse("host=h user=u password=p:q dbname=d"); err == nil || !strings.Contains(err.Error(), "key=value DSN") {
		t.Errorf("a key=value DSN should be named as such: %v", err)
	}
	if _, err := Parse("oracle://x/y"); err == nil || !strings.Contains(err.Error(), `"oracle"`) {
		t.Errorf("an unknown but well-formed scheme should still be named: %v", err)
	}
}
