package cli

// In-process tests of Main and of the helpers.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

func mainIn(t *testing.T, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(stdin), &out, &errb, env)
	return code, out.String(), errb.String()
}

func TestMainInProcess(t *testing.T) {
	env := []string{"FENCE_DSN=sqlite:" + filepath.Join(t.TempDir(), "f.db"), "PATH=/usr/bin:/bin"}
	if code, out, errs := mainIn(t, env, "", "migrate"); code != 0 || !strings.HasPrefix(out, "schema version ") {
		t.Fatalf("migrate: %d %q %q", code, out, errs)
	}
	code, out, errs := mainIn(t, env, "", "run", "--lease", "inproc", "--", "sh", "-c", `echo "fence $FENCE_TOKEN"; exit 4`)
	var fenceEnv int64
	if _, err := fmt.Sscanf(out, "fence %d\n", &fenceEnv); code != 4 || err != nil || fenceEnv <= 0 || errs != "" {
		t.Errorf("run: %d %q %q", code, out, errs)
	}
	// A second call builds its own command tree: no flag leaks from the first.
	code, out, _ = mainIn(t, env, "", "runs", "--json")
	var runs []runJSON
	if code != 0 || jsonUnmarshal(out, &runs) != nil || len(runs) != 1 || *runs[0].ExitCode != 4 || runs[0].Status != "failed" || runs[0].Fence != fenceEnv {
		t.Errorf("runs --json: %d %s", code, out)
	}
	code, out, _ = mainIn(t, env, "", "runs")
	if code != 0 || strings.Contains(out, "[") {
		t.Errorf("runs without --json after a --json call: %d %s", code, out)
	}
	// --dsn beats FENCE_DSN.
	other := "sqlite:" + filepath.Join(t.TempDir(), "other.db")
	if code, _, errs := mainIn(t, env, "", "--dsn", other, "leases"); code != ExitFailure || !strings.Contains(errs, "other.db has no fence tables") {
		t.Errorf("--dsn should win over FENCE_DSN: %d %s", code, errs)
	}
}

func TestHelp(t *testing.T) {
	if code, out, _ := mainIn(t, nil, ""); code != 0 || !strings.Contains(out, "Available Commands:") {
		t.Errorf("fence without arguments should print help: %d\n%s", code, out)
	}
	for _, c := range []struct {
		cmd  string
		want []string
	}{
		{"migrate", []string{"idempotent", "schema_version"}},
		{"run", []string{
			"FENCE_LEASE", "FENCE_OWNER", "FENCE_TOKEN", "FENCE_RUN_ID", "FENCE_DSN",
			"min(now + --grace, lapse - margin)", "the moment the lease", "CLOCK_BOOTTIME",
			"PR_SET_CHILD_SUBREAPER", "cgroup.kill", "dead-man's switch", "kill -9", "SIGTSTP", "What remains",
			"--export-dsn", "--dsn-file",
			"\n  64 ", "\n  69 ", "\n  75 ", "\n  76 ", "128+S", "--wait duration", "--grace duration",
		}},
		{"leases", []string{"held", "expired", "released", "revoked", "expires_in_ms", "db_now", "--json"}},
		{"runs", []string{"--status S", "--limit N", "duration_ms", "exit_code", "abandoned"}},
		{"revoke", []string{"--yes", "confirmation", "76", "release --force"}},
		{"demo", []string{"temporary SQLite"}},
		{"version", []string{"devel"}},
	} {
		code, out, errs := mainIn(t, nil, "", c.cmd, "--help")
		if code != 0 || errs != "" {
			t.Errorf("%s --help: %d %s", c.cmd, code, errs)
		}
		if !strings.Contains(out, "Examples:\n  fence "+c.cmd) {
			t.Errorf("%s --help has no example:\n%s", c.cmd, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help does not mention %q:\n%s", c.cmd, w, out)
			}
		}
	}
}

func TestTableAlignsWithColor(t *testing.T) {
	rows := [][]string{{"a", "held", "x"}, {"longer-name", "released", "y"}, {"b", "revoked", ""}}
	var plain, colored bytes.Buffer
	for _, c := range []struct {
		w     *bytes.Buffer
		color bool
	}{{&plain, false}, {&colored, true}} {
		tb := newTable(c.w, c.color, 1, stateColor, "NAME", "STATE", "OTHER")
		for _, r := range rows {
			tb.row(r...)
		}
		if err := tb.flush(); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(plain.String(), "\x1b") {
		t.Errorf("plain table has escapes: %q", plain.String())
	}
	if !strings.Contains(colored.String(), "\x1b[32mheld\x1b[0m") {
		t.Errorf("colored table: %q", colored.String())
	}
	stripped := regexp.MustCompile("\x1b\\[[0-9]+m").ReplaceAllString(colored.String(), "")
	if stripped != plain.String() {
		t.Errorf("colour changed the layout:\n%s\nvs\n%s", stripped, plain.String())
	}
	if want := "NAME         STATE     OTHER\na            held      x\nlonger-name  released  y\nb            revoked   -\n"; plain.String() != want {
		t.Errorf("table:\n%q\nwant\n%q", plain.String(), want)
	}
}

func TestNoColorWhenNotTerminal(t *testing.T) {
	a := &app{stdout: &bytes.Buffer{}}
	if a.color() {
		t.Error("colour on a buffer")
	}
	a = &app{stdout: devNull(t), env: []string{"TERM=xterm"}}
	if a.color() {
		t.Error("colour on /dev/null, which is a character device but not a terminal")
	}
}

func TestChildEnv(t *testing.T) {
	tok := fence.Token{Lease: "l", Owner: strings.Repeat("ab", 16), Fence: 7}
	in := []string{"PATH=/bin", "FENCE_TOKEN=1", "FENCE_DSN=old", "FENCE_OTHER=kept", "HOME=/h"}
	env := childEnv(in, tok, 42, "sqlite:x.db", "p_", true)
	want := []string{"PATH=/bin", "FENCE_OTHER=kept", "HOME=/h", "FENCE_LEASE=l", "FENCE_OWNER=" + tok.Owner,
		"FENCE_TOKEN=7", "FENCE_RUN_ID=42", "FENCE_DSN=sqlite:x.db", "FENCE_PREFIX=p_"}
	if fmt.Sprint(env) != fmt.Sprint(want) {
		t.Errorf("childEnv with --export-dsn:\n%q\nwant\n%q", env, want)
	}
	// Without --export-dsn no FENCE_DSN reaches the command, not even one
	// fence itself got from its environment.
	env = childEnv(in, tok, 42, "postgres://u:secret@h/d", "p_", false)
	want = []string{"PATH=/bin", "FENCE_OTHER=kept", "HOME=/h", "FENCE_LEASE=l", "FENCE_OWNER=" + tok.Owner,
		"FENCE_TOKEN=7", "FENCE_RUN_ID=42", "FENCE_PREFIX=p_"}
	if fmt.Sprint(env) != fmt.Sprint(want) {
		t.Errorf("childEnv:\n%q\nwant\n%q", env, want)
	}
}

func TestFormatting(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond:   "850ms",
		27400 * time.Millisecond: "27.4s",
		192 * time.Second:        "3m12s",
		-3200 * time.Millisecond: "-3.2s",
	} {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{2 * time.Second: "10s", 25 * time.Second: "30s", 29 * time.Minute: "1h0m0s", 90 * time.Minute: "2h0m0s"} {
		if got := suggestWait(d); got != want {
			t.Errorf("suggestWait(%v) = %q, want %q", d, got, want)
		}
	}
	for name, want := range map[string]string{"admin:reconciliation": "admin:reconciliation", "a b": `"a b"`, "x\x1b[31m": `"x\x1b[31m"`} {
		if got := quoteName(name); got != want {
			t.Errorf("quoteName(%q) = %s, want %s", name, got, want)
		}
	}
	if got := oneLine("fence: lease x:\n  fence: lost"); got != "lease x: lost" {
		t.Errorf("oneLine: %q", got)
	}
	if got := cellText("a\tb\x1b[2Jc"); got != `a b\x1b[2Jc` {
		t.Errorf("cellText: %q", got)
	}
}

func TestDescribeLost(t *testing.T) {
	for _, c := range []struct {
		e    fence.LostError
		want string
	}{
		{fence.LostError{Lease: "L", Fence: 3, Current: 4, Reason: fence.LostSuperseded}, "lease L fence 3 superseded by fence 4"},
		{fence.LostError{Lease: "L", Fence: 3, Current: 4, Reason: fence.LostRevoked}, "lease L fence 3 revoked (fence is now 4)"},
		{fence.LostError{Lease: "L", Fence: 3, Reason: fence.LostExpired}, "lease L fence 3 expired by the database clock"},
		{fence.LostError{Lease: "L", Fence: 3, Reason: fence.LostUnknown}, "lease L fence 3 no longer holds the lease"},
	} {
		if got := describeLost(&c.e); got != c.want {
			t.Errorf("describeLost(%+v) = %q, want %q", c.e, got, c.want)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("x: %w", fence.ErrInvalid), ExitUsage},
		{fmt.Errorf("x: %w", fence.ErrUnavailable), ExitUnavailable},
		{&fence.AmbiguousError{Op: "acquire", Err: errors.New("eof")}, ExitUnavailable},
		{&fence.LostError{Lease: "l", Fence: 1}, ExitLost},
		{&fence.HeldError{Lease: "l"}, ExitNotAcquired},
		{fail(ExitNotFound, errors.New("x"), ""), ExitNotFound},
		{errors.New("other"), ExitFailure},
	} {
		if code, _ := classify(c.err, "fence x"); code != c.code {
			t.Errorf("classify(%v) = %d, want %d", c.err, code, c.code)
		}
	}
}

func TestConfirm(t *testing.T) {
	l := fence.LeaseInfo{Name: "l", State: fence.StateHeld, Owner: strings.Repeat("c", 32), Holder: "web-1:42", Fence: 2, Remaining: 5 * time.Second}
	for in, want := range map[string]bool{"y\n": true, "YES\n": true, "n\n": false, "\n": false, "": false, "yes please\n": false} {
		var errb bytes.Buffer
		a := &app{stdin: strings.NewReader(in), stderr: &errb}
		got, err := a.confirm(l)
		if err != nil || got != want {
			t.Errorf("confirm(%q) = %v, %v; want %v", in, got, err, want)
		}
		if !strings.Contains(errb.String(), `Revoke lease l (held, fence 2, held by "web-1:42", expires in 5.0s)? `) {
			t.Errorf("prompt: %q", errb.String())
		}
	}
}

func devNull(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
