package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A libpq key=value DSN with a ':' in its password reached the "unknown
// DSN scheme" error whole up to that ':', password included, from --dsn,
// --dsn-file and FENCE_DSN alike. It is refused without quoting it.
func TestKeyValueDSNNotEchoed(t *testing.T) {
	const dsn = "user=postgres password=Sec7ret:Pw host=127.0.0.1 dbname=app"
	file := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(file, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"--dsn", nil, []string{"--dsn", dsn, "leases"}},
		{"--dsn-file", nil, []string{"--dsn-file", file, "leases"}},
		{"FENCE_DSN", []string{"FENCE_DSN=" + dsn}, []string{"leases"}},
	} {
		code, out, errs := mainIn(t, c.env, "", c.args...)
		if code != ExitUsage {
			t.Errorf("%s: exit %d, want %d (%s)", c.name, code, ExitUsage, errs)
		}
		for _, f := range []string{"Sec7", "7ret", ":Pw", "user=postgres", "dbname=app"} {
			if strings.Contains(out+errs, f) {
				t.Errorf("%s: output contains %q: %s%s", c.name, f, out, errs)
			}
		}
		if !strings.Contains(errs, "key=value DSN") {
			t.Errorf("%s: the error should say what is wrong: %s", c.name, errs)
		}
	}
}

// fence leases --json and fence runs --json printed every owner token, the
// capability to renew or release a lease. They print "hidden" unless
// --show-tokens is given.
func TestJSONHidesOwnerTokens(t *testing.T) {
	env := []string{"FENCE_DSN=sqlite:" + filepath.Join(t.TempDir(), "f.db"), "PATH=/usr/bin:/bin"}
	if code, _, errs := mainIn(t, env, "", "migrate"); code != 0 {
		t.Fatalf("migrate: %d %s", code, errs)
	}
	code, out, errs := mainIn(t, env, "", "run", "--lease", "tok", "--", "sh", "-c", `echo "$FENCE_OWNER"`)
	owner := strings.TrimSpace(out)
	if code != 0 || len(owner) < 16 {
		t.Fatalf("run: %d %q %s", code, out, errs)
	}
	for _, c := range []string{"leases", "runs"} {
		code, out, errs := mainIn(t, env, "", c, "--json")
		if code != 0 || strings.Contains(out, owner) || strings.Contains(out, owner[:8]) || !strings.Contains(out, `"owner": "hidden"`) {
			t.Errorf("%s --json should hide the owner token: %d %s %s", c, code, out, errs)
		}
		code, out, errs = mainIn(t, env, "", c, "--json", "--show-tokens")
		if code != 0 || !strings.Contains(out, `"owner": "`+owner+`"`) {
			t.Errorf("%s --json --show-tokens should show the owner token %s: %d %s %s", c, owner, code, out, errs)
		}
		code, out, _ = mainIn(t, env, "", c)
		if code != 0 || strings.Contains(out, owner[:8]) {
			t.Errorf("%s: the table shows the owner token: %s", c, out)
		}
	}
}
