package dsnurl

import (
	"reflect"
	"testing"
)

// A failover cluster's DSN lists every server; pgx tries them in order and
// keeps the first that target_session_attrs accepts (docs/CLUSTERS.md).
func TestParseMultiHost(t *testing.T) {
	u, err := Parse("postgres://fence:pw@127.0.0.1:5441,127.0.0.1:5442,[::1]:5443,db3/app?target_session_attrs=read-write")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []HostPort{{"127.0.0.1", "5441"}, {"127.0.0.1", "5442"}, {"[::1]", "5443"}, {"db3", ""}}
	if !reflect.DeepEqual(u.Hosts, want) {
		t.Errorf("Hosts = %+v, want %+v", u.Hosts, want)
	}
	if u.Password != "pw" || u.DBName != "app" {
		t.Errorf("password %q, database %q; want pw, app", u.Password, u.DBName)
	}
	if v, ok := u.Get("target_session_attrs"); !ok || v != "read-write" {
		t.Errorf("target_session_attrs = %q, %v; want read-write", v, ok)
	}
	for _, bad := range []string{"postgres://u@h1,,h2/db", "postgres://u@h1,/db"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error for an empty host in the list", bad)
		}
	}
}
