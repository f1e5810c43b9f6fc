package fence

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestParseDSN(t *testing.T) {
	for dsn, want := range map[string]Dialect{
		"sqlite:fence.db":                          SQLite,
		"sqlite::memory:":                          SQLite,
		"sqlite:///tmp/x.db":                       SQLite,
		"postgres://u:p@h:5432/db?sslmode=disable": Postgres,
		"postgresql://h/db":                        Postgres,
		"mysql://root@127.0.0.1:3306/test":         MySQL,
	} {
		d, err := ParseDSN(dsn)
		if err != nil || d.Dialect != want {
			t.Errorf("%q: %+v %v", dsn, d, err)
		}
	}
	for _, dsn := range []string{"", "fence.db", "oracle://x/y", "sqlite:", "mysql://h:3306", "postgres:///db", "mysql://u:p@h/db\x00", "postgres://u:p@[::1/db"} {
		if _, err := ParseDSN(dsn); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", dsn, err)
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
	d, _ := ParseDSN("mysql://u:" + secret + "@h:1/db")
	if strings.Contains(d.Redacted, secret) {
		t.Errorf("redacted DSN %q", d.Redacted)
	}
	if _, err := Open(context.Background(), "postgres://u:"+secret+"@127.0.0.1:1/db?connect_timeout=1"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("unreachable database: %v, want ErrUnavailable", err)
	}
}
