package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

func TestMigrateIsIdempotent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		// eachBackend migrated once already.
		r := b.fence(t, "migrate")
		if r.code != 0 {
			t.Fatal(r)
		}
		if !regexp.MustCompile(`^schema version [1-9][0-9]* \(tables ` + b.prefix + `leases, `).MatchString(r.stdout) {
			t.Errorf("migrate output: %q", r.stdout)
		}
		r = b.fence(t, "migrate", "--json")
		var v struct {
			SchemaVersion int    `json:"schema_version"`
			Prefix        string `json:"prefix"`
		}
		if r.code != 0 || jsonUnmarshal(r.stdout, &v) != nil || v.SchemaVersion < 1 || v.Prefix != b.prefix {
			t.Errorf("migrate --json: %+v\n%v", v, r)
		}
	})
}

func TestRunPassesExitStatusAndEnvironment(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		lease := "job:" + b.prefix
		envFile := filepath.Join(b.dir, "env.txt")
		script := `printf '%s\n' "$FENCE_LEASE" "$FENCE_OWNER" "$FENCE_TOKEN" "$FENCE_RUN_ID" "$FENCE_DSN" "$FENCE_PREFIX" > ` + envFile + `; echo out; exit 3`
		r := b.fence(t, "run", "--lease", lease, "--", "sh", "-c", script)
		if r.code != 3 {
			t.Fatalf("want the command's exit status 3: %v", r)
		}
		if r.stdout != "out\n" || r.stderr != "" {
			t.Errorf("fence run should add nothing to a failing command's output: %v", r)
		}
		got, err := os.ReadFile(envFile)
		if err != nil {
			t.Fatal(err)
		}
		env := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
		if len(env) != 6 || env[0] != lease || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(env[1]) ||
			!regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(env[2]) || env[4] != "" || env[5] != b.prefix {
			t.Errorf("environment of the command (FENCE_DSN only with --export-dsn): %q", env)
		}
		if r := b.fence(t, "run", "--lease", lease+"x", "--export-dsn", "--", "sh", "-c", `test "$FENCE_DSN" = "`+b.dsn+`"`); r.code != 0 {
			t.Errorf("--export-dsn: the command should get FENCE_DSN: %v", r)
		}

		if r := b.fence(t, "run", "--lease", lease, "--", "sh", "-c", "kill -KILL $$"); r.code != 128+9 {
			t.Errorf("a command killed by SIGKILL: want exit 137: %v", r)
		}
		if r := b.fence(t, "run", "--lease", lease, "true"); r.code != 0 {
			t.Errorf("fence run true: %v", r)
		}
		if r := b.fence(t, "run", "--lease", lease, "--", "no-such-command-fence-test"); r.code != ExitNotFound {
			t.Errorf("a command that does not exist: want exit 127: %v", r)
		}

		runs := b.runsJSON(t, "--lease", lease)
		if len(runs) != 3 {
			t.Fatalf("want 3 runs, newest first: %+v", runs)
		}
		want := []struct {
			status string
			code   int
		}{{"succeeded", 0}, {"failed", 137}, {"failed", 3}}
		for i, w := range want {
			r := runs[i]
			if string(r.Status) != w.status || r.ExitCode == nil || *r.ExitCode != w.code ||
				r.Lease != lease || r.FinishedAt == nil || r.DurationMs == nil {
				t.Errorf("run %d: want %s exit %d, got %+v", i, w.status, w.code, r)
			}
			// Newest first, so each run's fence is above the next one's.
			if i > 0 && runs[i-1].Fence <= r.Fence {
				t.Errorf("run %d has fence %d, not below the newer run's %d", i, r.Fence, runs[i-1].Fence)
			}
		}
		if strconv.FormatInt(runs[2].Fence, 10) != env[2] {
			t.Errorf("FENCE_TOKEN %s is not the first run's fence %d", env[2], runs[2].Fence)
		}
		if strconv.FormatInt(runs[2].ID, 10) != env[3] || runs[2].Owner != env[1] {
			t.Errorf("FENCE_RUN_ID %s / FENCE_OWNER %s do not match the run %+v", env[3], env[1], runs[2])
		}
		if l := b.lease(t, lease); l.State != "released" || l.Fence != runs[0].Fence {
			t.Errorf("after the runs the lease should be released at the last run's fence %d: %+v", runs[0].Fence, l)
		}
	})
}

func TestRunContention(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		started := filepath.Join(b.dir, "started")
		a := b.start(t, "run", "--lease", "contended", "--ttl", "10s", "--", "sh", "-c", "touch "+started+"; sleep 3")
		waitFile(t, started, 30*time.Second)

		r := b.fence(t, "run", "--lease", "contended", "--", "sh", "-c", "echo must-not-run")
		if r.code != ExitNotAcquired {
			t.Fatalf("second fence run: want exit 75: %v", r)
		}
		if strings.Contains(r.stdout, "must-not-run") {
			t.Errorf("the second command ran: %v", r)
		}
		host, _ := os.Hostname()
		oneErrorLine(t, r, fmt.Sprintf("lease contended is held by %q (fence %d, run ", host+":"+strconv.Itoa(a.cmd.Process.Pid), b.lease(t, "contended").Fence))
		if !regexp.MustCompile(`for another [0-9.]+m?s by the database clock`).MatchString(r.stderr) {
			t.Errorf("the holder and its time left should be named: %s", r.stderr)
		}

		if ra := a.wait(time.Minute); ra.code != 0 {
			t.Fatalf("the holder: %v", ra)
		}
		runs := b.runsJSON(t, "--lease", "contended")
		if len(runs) != 1 || runs[0].Status != "succeeded" {
			t.Errorf("only the holder should have a run, succeeded: %+v", runs)
		}
	})
}

// The article's story with real processes: A's fence process is paused
// while it holds the lease, B takes over and completes, A resumes.
func TestRunPausedRunnerExitsLost(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		started := filepath.Join(b.dir, "started")
		a := b.start(t, "run", "--lease", "story", "--ttl", "3s", "--", "sh", "-c", "touch "+started+"; sleep 6; echo done")
		waitFile(t, started, 30*time.Second) // A's run is recorded
		a.signal(syscall.SIGSTOP)
		time.Sleep(4 * time.Second) // past A's TTL

		// --wait only for robustness on a slow machine: A's lease lapses
		// 3s after its last renewal at the latest.
		rb := b.fence(t, "run", "--lease", "story", "--wait", "30s", "--", "true")
		if rb.code != 0 {
			t.Fatalf("B: %v", rb)
		}
		a.signal(syscall.SIGCONT)
		ra := a.wait(time.Minute)
		if ra.code != ExitLost {
			t.Fatalf("A after SIGCONT: want exit 76: %v", ra)
		}
		runs := b.runsJSON(t, "--lease", "story")
		if len(runs) != 2 {
			t.Fatalf("want A's and B's runs: %+v", runs)
		}
		oneErrorLine(t, ra, fmt.Sprintf("lease story fence %d superseded by fence %d", runs[1].Fence, runs[0].Fence))
		if runs[0].Fence <= runs[1].Fence || runs[0].Status != "succeeded" {
			t.Errorf("B's run: %+v (A's %+v)", runs[0], runs[1])
		}
		if runs[1].Status == "succeeded" || runs[1].Status == "running" {
			t.Errorf("A's run must end neither succeeded nor running: %+v", runs[1])
		}
		// B's run abandoned A's; A's end is when A stopped, after B had
		// started, so the timeline shows the overlap (before, whoever
		// noticed first decided: the keeper left A ending at B's start).
		if runs[1].Status != "abandoned" || runs[1].FinishedAt == nil || runs[0].StartedAt == nil ||
			*runs[1].FinishedAt <= *runs[0].StartedAt || runs[1].Error == nil ||
			!strings.Contains(*runs[1].Error, "stopped late") && !strings.Contains(*runs[1].Error, "completion refused") {
			str := func(p *string) string {
				if p == nil {
					return "null"
				}
				return *p
			}
			t.Errorf("A's run should end abandoned, after B started, saying how it ended late: A %s, ended %s, error %q; B started %s",
				runs[1].Status, str(runs[1].FinishedAt), str(runs[1].Error), str(runs[0].StartedAt))
		}
	})
}

func TestRunForwardsSignals(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, c := range []struct {
			sig  syscall.Signal
			name string
			code int
		}{{syscall.SIGTERM, "TERM", 7}, {syscall.SIGINT, "INT", 9}} {
			started := filepath.Join(b.dir, "started-"+c.name)
			got := filepath.Join(b.dir, "got-"+c.name)
			script := `trap 'echo ` + c.name + ` > ` + got + `; exit ` + strconv.Itoa(c.code) + `' ` + c.name +
				`; touch ` + started + `; while :; do sleep 0.1; done`
			p := b.start(t, "run", "--lease", "signals", "--ttl", "10s", "--", "sh", "-c", script)
			waitFile(t, started, 30*time.Second)
			p.signal(c.sig)
			r := p.wait(time.Minute)
			if r.code != c.code {
				t.Errorf("SIG%s: want the command's exit status %d: %v", c.name, c.code, r)
			}
			if b, err := os.ReadFile(got); err != nil || string(b) != c.name+"\n" {
				t.Errorf("SIG%s did not reach the command: %q %v", c.name, b, err)
			}
		}
		runs := b.runsJSON(t, "--lease", "signals")
		if len(runs) != 2 || runs[0].Status != "failed" || runs[0].ExitCode == nil || *runs[0].ExitCode != 9 ||
			runs[1].ExitCode == nil || *runs[1].ExitCode != 7 {
			t.Errorf("runs: %+v", runs)
		}
	})
}

func TestRunWait(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		// The holder runs until the test lets it end (the file done), not for
		// 3 s: five fence processes started on a loaded machine took longer
		// than that, and the lease was free before the waiters asked.
		started := filepath.Join(b.dir, "started")
		done := filepath.Join(b.dir, "done")
		a := b.start(t, "run", "--lease", "queue", "--ttl", "30s", "--holder", "batch-1", "--", "sh", "-c",
			"touch "+started+"; while [ ! -e "+done+" ]; do sleep 0.05; done")
		waitFile(t, started, 30*time.Second)
		held := b.lease(t, "queue").Fence

		short := b.start(t, "run", "--lease", "queue", "--wait", "300ms", "--", "true")
		long := b.start(t, "run", "--lease", "queue", "--wait", "60s", "--", "sh", "-c", `echo "fence $FENCE_TOKEN"`)

		rs := short.wait(time.Minute)
		if rs.code != ExitNotAcquired {
			t.Errorf("--wait 300ms on a held lease: want 75: %v", rs)
		}
		oneErrorLine(t, rs, fmt.Sprintf("still held after waiting 300ms: lease queue is held by %q (fence %d, run ", "batch-1", held))
		if rs.elapsed < 300*time.Millisecond {
			t.Errorf("--wait 300ms gave up after %v", rs.elapsed)
		}

		intr := b.start(t, "--log-level", "info", "run", "--lease", "queue", "--wait", "60s", "--", "sh", "-c", "echo must-not-run")
		intr.waitStderr("fence: waiting for lease", 30*time.Second)
		intr.signal(syscall.SIGINT)
		if ri := intr.wait(time.Minute); ri.code != 128+int(syscall.SIGINT) || strings.Contains(ri.stdout, "must-not-run") ||
			!strings.Contains(ri.stderr, "fence run: interrupted by SIGINT while waiting for lease queue") {
			t.Errorf("SIGINT while waiting: want exit 130 and no command: %v", ri)
		}

		rl := b.start(t, "run", "--lease", "queue", "--wait", "0", "--", "true").wait(time.Minute)
		if rl.code != ExitNotAcquired {
			t.Errorf("--wait 0 while held: want 75: %v", rl)
		}

		if err := os.WriteFile(done, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if ra := a.wait(time.Minute); ra.code != 0 {
			t.Fatalf("holder: %v", ra)
		}
		rw := long.wait(time.Minute)
		var got int64
		if _, err := fmt.Sscanf(rw.stdout, "fence %d\n", &got); rw.code != 0 || err != nil || got <= held {
			t.Errorf("--wait 60s: want to acquire a fence above the holder's %d: %v", held, rw)
		}
	})
}

func TestReleaseForceStopsHolder(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		started := filepath.Join(b.dir, "started")
		got := filepath.Join(b.dir, "got")
		bgpid := filepath.Join(b.dir, "bgpid")
		// The command ignores SIGTERM and leaves a background process in its
		// group: SIGKILL must come anyway, before the lease could lapse and
		// long before --grace 60s, and must take the whole group.
		// (Its shell's "Terminated" notices go to /dev/null: stderr is fence's.)
		// The background process writes its own pid as /proc (the host's,
		// also inside fence's PID namespace, where $! is a namespace pid)
		// numbers it: read by the shell itself, /proc/self is that shell,
		// which then becomes the sleep.
		script := `exec 2>/dev/null; trap 'echo TERM >> ` + got + `' TERM; sh -c 'read -r p _ < /proc/self/stat; echo $p > ` + bgpid + `; exec sleep 300' & ` +
			`while [ ! -s ` + bgpid + ` ]; do sleep 0.05; done; touch ` + started + `; while :; do sleep 0.1; done`
		a := b.start(t, "run", "--lease", "revoked", "--ttl", "3s", "--grace", "60s", "--", "sh", "-c", script)
		waitFile(t, started, 30*time.Second)
		bg, err := os.ReadFile(bgpid)
		if err != nil {
			t.Fatal(err)
		}

		f1 := b.lease(t, "revoked").Fence
		host, _ := os.Hostname()
		rel := time.Now()
		r := b.fence(t, "revoke", "revoked", "--yes")
		f2 := b.lease(t, "revoked").Fence
		if r.code != 0 || f2 <= f1 || !strings.Contains(r.stdout, fmt.Sprintf("revoked lease revoked: fence is now %d; its holder %q (fence %d) can no longer", f2, host+":"+strconv.Itoa(a.cmd.Process.Pid), f1)) {
			t.Fatalf("revoke (fence %d before): %v", f1, r)
		}
		ra := a.wait(time.Minute)
		if ra.code != ExitLost {
			t.Fatalf("holder after revoke: want 76: %v", ra)
		}
		if took := time.Since(rel); took > 20*time.Second {
			t.Errorf("the holder took %v to stop: --grace 60s should be capped by the lease's 3s TTL", took)
		}
		oneErrorLine(t, ra, fmt.Sprintf("lease revoked fence %d revoked (fence is now %d)", f1, f2))
		if !strings.Contains(ra.stderr, "SIGKILL") {
			t.Errorf("a command that ignores SIGTERM must be killed: %s", ra.stderr)
		}
		if g, _ := os.ReadFile(got); !strings.Contains(string(g), "TERM") {
			t.Errorf("the command did not get SIGTERM first")
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(bg)))
		if pid <= 0 || alive(pid) {
			t.Errorf("the command's background process %d outlived it", pid)
		}

		runs := b.runsJSON(t, "--lease", "revoked")
		if len(runs) != 1 || runs[0].Status != "lost" || runs[0].Error == nil || !strings.Contains(*runs[0].Error, "revoked") {
			t.Errorf("the holder's run: %+v", runs)
		}
		if l := b.lease(t, "revoked"); l.State != "revoked" || l.Fence != f2 || l.Owner != "" || l.ExpiresAt != nil {
			t.Errorf("lease after revoke: %+v", l)
		}
		// The next acquisition continues above the revoke's fence.
		if r := b.fence(t, "run", "--lease", "revoked", "--", "sh", "-c", `test "$FENCE_TOKEN" -gt `+strconv.FormatInt(f2, 10)); r.code != 0 {
			t.Errorf("after a revoke the next run should get a fence above %d: %v", f2, r)
		}
	})
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			if syscall.Kill(pid, 0) != nil {
				return false
			}
		} else if f := strings.Fields(string(st)); len(f) > 2 && (f[2] == "Z" || f[2] == "X") {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestListingsJSON(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		if r := b.fence(t, "leases", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("no leases: want []: %v", r)
		}
		if r := b.fence(t, "runs", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("no runs: want []: %v", r)
		}
		if r := b.fence(t, "run", "--lease", "done", "--holder", "batch-7 (eu)", "true"); r.code != 0 {
			t.Fatal(r)
		}
		started := filepath.Join(b.dir, "started")
		p := b.start(t, "run", "--lease", "busy", "--ttl", "20s", "--", "sh", "-c", "touch "+started+"; sleep 30")
		waitFile(t, started, 30*time.Second)
		host, _ := os.Hostname()
		busyHolder := host + ":" + strconv.Itoa(p.cmd.Process.Pid) // fence run's default

		var leases []map[string]any
		r := b.fence(t, "leases", "--json", "--show-tokens")
		if err := jsonUnmarshal(r.stdout, &leases); err != nil || len(leases) != 2 {
			t.Fatalf("leases --json: %v\n%v", err, r)
		}
		wantKeys(t, leases[0], "name", "state", "owner", "holder", "fence", "expires_at", "expires_in_ms", "acquired_at", "updated_at", "db_now")
		busy, done := leases[0], leases[1] // ordered by name
		// A fence is the database clock in µs: a plain JSON integer, below
		// 2^53 so that JavaScript and float64 readers get it exactly.
		busyFence := b.lease(t, "busy").Fence
		if busy["name"] != "busy" || busy["state"] != "held" || busy["fence"] != float64(busyFence) || busyFence <= 0 ||
			busyFence >= 1<<53 || len(busy["owner"].(string)) != 32 || busy["holder"] != busyHolder {
			t.Errorf("held lease: %v (fence %d, holder %s)", busy, busyFence, busyHolder)
		}
		if !strings.Contains(r.stdout, `"fence": `+strconv.FormatInt(busyFence, 10)+",") {
			t.Errorf("leases --json should print the fence as a plain integer:\n%s", r.stdout)
		}
		if ms, ok := busy["expires_in_ms"].(float64); !ok || ms <= 0 || ms > 20000 {
			t.Errorf("held lease expires_in_ms: %v", busy["expires_in_ms"])
		}
		for _, k := range []string{"expires_at", "acquired_at", "updated_at", "db_now"} {
			if s, _ := busy[k].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(s) {
				t.Errorf("%s = %v, want RFC 3339 UTC with milliseconds", k, busy[k])
			}
		}
		if done["state"] != "released" || done["expires_at"] != nil || done["expires_in_ms"] != nil || done["holder"] != "batch-7 (eu)" {
			t.Errorf("released lease: %v", done)
		}

		var runs []map[string]any
		r = b.fence(t, "runs", "--json")
		if err := jsonUnmarshal(r.stdout, &runs); err != nil || len(runs) != 2 {
			t.Fatalf("runs --json: %v\n%v", err, r)
		}
		wantKeys(t, runs[0], "id", "kind", "lease", "owner", "holder", "fence", "status", "started_at", "finished_at", "duration_ms", "exit_code", "error", "result")
		running, finished := runs[0], runs[1]
		if running["holder"] != busyHolder || finished["holder"] != "batch-7 (eu)" {
			t.Errorf("run holders %v, %v; want %s, batch-7 (eu)", running["holder"], finished["holder"], busyHolder)
		}
		if running["lease"] != "busy" || running["status"] != "running" || running["finished_at"] != nil ||
			running["duration_ms"] != nil || running["exit_code"] != nil || running["error"] != nil {
			t.Errorf("running run: %v", running)
		}
		if res, _ := running["result"].(map[string]any); res["command"] != "sh" || res["pid"] != float64(p.cmd.Process.Pid) {
			t.Errorf("running run's result should name the command and fence's pid: %v", running["result"])
		}
		if finished["status"] != "succeeded" || finished["exit_code"] != 0.0 || finished["duration_ms"] == nil {
			t.Errorf("finished run: %v", finished)
		}
		if r := b.runsJSON(t, "--status", "running"); len(r) != 1 || r[0].Lease != "busy" {
			t.Errorf("--status running: %+v", r)
		}
		if r := b.runsJSON(t, "--limit", "1"); len(r) != 1 || r[0].Lease != "busy" {
			t.Errorf("--limit 1: %+v", r)
		}

		// The tables, for people.
		r = b.fence(t, "leases")
		if !regexp.MustCompile(`(?m)^NAME +STATE +HOLDER +FENCE +EXPIRES IN\n`).MatchString(r.stdout) ||
			!regexp.MustCompile(`(?m)^busy +held +`+regexp.QuoteMeta(busyHolder)+` +`+strconv.FormatInt(busyFence, 10)+` +[0-9.]+s$`).MatchString(r.stdout) ||
			!regexp.MustCompile(`(?m)^done +released +batch-7 \(eu\) +\d+ +-$`).MatchString(r.stdout) ||
			strings.Contains(r.stdout, "\x1b") {
			t.Errorf("leases table:\n%s", r.stdout)
		}
		r = b.fence(t, "runs")
		if !regexp.MustCompile(`(?m)^ID +LEASE +FENCE +STATUS +HOLDER +STARTED +DURATION +EXIT +ERROR\n`).MatchString(r.stdout) ||
			!regexp.MustCompile(`(?m)^\d+ +busy +`+strconv.FormatInt(busyFence, 10)+` +running +`+regexp.QuoteMeta(busyHolder)+` +\S+ \S+ +[0-9.]+m?s… +- +-$`).MatchString(r.stdout) {
			t.Errorf("runs table:\n%s", r.stdout)
		}
		p.signal(syscall.SIGTERM)
		p.wait(time.Minute)
	})
}

func wantKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	if len(m) != len(keys) {
		t.Errorf("JSON object has %d fields, want %d (%v): %v", len(m), len(keys), keys, m)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON object has no %q: %v", k, m)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	b := sqliteOnly(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", "true"}, "--lease is required"},
		{[]string{"run", "--lease", "x"}, "no command to run"},
		{[]string{"run", "--lease", "x", "--ttl", "soon", "--", "true"}, `invalid argument "soon" for "--ttl"`},
		{[]string{"run", "--lease", "x", "--ttl", "0s", "--", "true"}, "--ttl"},
		{[]string{"run", "--lease", "x", "--ttl", "10ms", "--", "true"}, "too short"},
		{[]string{"run", "--lease", "x", "--grace", "-1s", "--", "true"}, "--grace -1s is negative"},
		{[]string{"run", "--lease", "x", "--wait", "-1s", "--", "true"}, "--wait -1s is negative"},
		{[]string{"run", "--lease", "", "--", "true"}, "--lease is required"},
		{[]string{"run", "--lease", "a\x01b", "--", "true"}, "control character"},
		{[]string{"run", "--bogus", "--lease", "x", "--", "true"}, "unknown flag: --bogus"},
		{[]string{"runs", "--status", "won"}, `unknown --status "won"`},
		{[]string{"runs", "--limit", "-1"}, "--limit -1 is negative"},
		{[]string{"runs", "--limit", "many"}, `invalid argument "many"`},
		{[]string{"release", "x"}, "needs --force"},
		{[]string{"release"}, "exactly one lease name"},
		{[]string{"leases", "extra"}, `unexpected argument "extra"`},
		{[]string{"leasse"}, "did you mean 'fence leases'?"},
		{[]string{"--log-level", "loud", "leases"}, `unknown --log-level "loud"`},
		{[]string{"--prefix", "no-dashes", "leases"}, "--prefix"},
		{[]string{"--dsn", "oracle://x", "leases"}, `unknown DSN scheme "oracle"`},
		{[]string{"--dsn-file", "/nonexistent/fence-dsn", "leases"}, `--dsn-file "/nonexistent/fence-dsn": no such file or directory`},
		{[]string{"--dsn-file", "/dev/null", "leases"}, "the first line is empty"},
		{[]string{"--dsn", "sqlite:x.db", "--dsn-file", "/dev/null", "leases"}, "--dsn and --dsn-file are both set"},
	} {
		r := b.fence(t, c.args...)
		if r.code != ExitUsage {
			t.Errorf("fence %q: want exit 64: %v", c.args, r)
			continue
		}
		oneErrorLine(t, r, c.want)
	}
}

func TestUnreachableDatabase(t *testing.T) {
	const password = "s3cr3t-pw"
	dir := t.TempDir()
	b := &backend{name: "none", dir: dir, prefix: fence.DefaultPrefix}
	for _, dsn := range []string{
		// Port 1 on the loopback: nothing listens there, the refusal is immediate.
		"postgres://fence:" + password + "@127.0.0.1:1/fence?sslmode=disable",
		"postgresql://fence@127.0.0.1:1/fence?sslmode=disable&password=" + password,
		"mysql://fence:" + password + "@127.0.0.1:1/fence",
		"sqlite:" + filepath.Join(dir, "no", "such", "dir", "fence.db"),
	} {
		for _, args := range [][]string{
			{"--dsn", dsn, "leases"},
			{"--dsn", dsn, "run", "--lease", "x", "--", "true"},
			{"--dsn", dsn, "migrate"},
		} {
			r := b.fence(t, args...)
			if r.code != ExitUnavailable {
				t.Errorf("fence %q: want exit 69: %v", args[2:], r)
			}
			if args[2] == "run" && !strings.HasPrefix(dsn, "sqlite:") {
				if !strings.Contains(r.stderr, "fence run: warning: the password in --dsn can be read by every user") {
					t.Errorf("no warning for a password in --dsn: %v", r)
				}
				r.stderr = dropLines(r.stderr, "fence run: warning: ")
			}
			oneErrorLine(t, r, "database unavailable")
			if strings.Contains(r.stderr+r.stdout, password) {
				t.Errorf("the password was printed: %v", r)
			}
		}
		// The same through FENCE_DSN.
		b.dsn = dsn
		r := b.fence(t, "runs")
		if r.code != ExitUnavailable || strings.Contains(r.stderr, password) {
			t.Errorf("FENCE_DSN: want exit 69 without the password: %v", r)
		}
	}
}

func TestNotMigrated(t *testing.T) {
	dir := t.TempDir()
	b := &backend{name: "sqlite", dsn: "sqlite:" + filepath.Join(dir, "fresh.db"), prefix: fence.DefaultPrefix, dir: dir}
	for _, args := range [][]string{{"leases"}, {"runs"}, {"run", "--lease", "x", "true"}, {"release", "x", "--force"}} {
		r := b.fence(t, args...)
		if r.code != ExitFailure {
			t.Errorf("fence %q on a fresh database: %v", args, r)
		}
		oneErrorLine(t, r, "run 'fence migrate' first")
	}
}

func TestReleaseUnknownLease(t *testing.T) {
	b := sqliteOnly(t)
	r := b.fence(t, "release", "nope", "--force")
	if r.code != ExitFailure {
		t.Fatalf("%v", r)
	}
	oneErrorLine(t, r, "no lease named nope")
}

func TestDemo(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	b := &backend{name: "none", dir: t.TempDir(), dsn: "postgres://ignored@127.0.0.1:1/x", prefix: fence.DefaultPrefix}
	r := b.fence(t, "demo")
	if r.code != 0 {
		t.Fatal(r)
	}
	// Fences start at the database clock in µs: read A's and B's from the
	// timeline, then check that every line uses them consistently.
	fa, fb := demoFence(t, r.stdout, `A  acquires lease admin:reconciliation for 1s: fence (\d+)\n`),
		demoFence(t, r.stdout, `B  acquires the expired lease: fence (\d+), higher than A's`)
	if fb <= fa {
		t.Errorf("demo: B's fence %s not above A's %s", fb, fa)
	}
	for _, want := range []string{
		"A  acquires lease admin:reconciliation for 1s: fence " + fa,
		"the lease expires by the database clock",
		"B  acquires the expired lease: fence " + fb + ", higher than A's " + fa,
		"A's run 1 is now abandoned",
		"-> 1 row",
		"B  completes run 2 with fenced completion: succeeded",
		"A  -> 0 rows: lease admin:reconciliation fence " + fa + " superseded by fence " + fb,
		"B's result is intact",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !regexp.MustCompile(`(?m)^ +2 +admin:reconciliation +`+fb+` +succeeded `).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^ +1 +admin:reconciliation +`+fa+` +(abandoned|lost) `).MatchString(r.stdout) {
		t.Errorf("demo runs table:\n%s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("demo stderr: %s", r.stderr)
	}
}

func TestVersion(t *testing.T) {
	b := &backend{name: "none", dir: t.TempDir(), prefix: fence.DefaultPrefix}
	r := b.fence(t, "version")
	if r.code != 0 || !regexp.MustCompile(`^fence \S+ \(go\S+ \w+/\w+\)\n$`).MatchString(r.stdout) {
		t.Errorf("version: %v", r)
	}
	var v map[string]string
	r = b.fence(t, "version", "--json")
	if r.code != 0 || jsonUnmarshal(r.stdout, &v) != nil || v["version"] == "" || v["go"] == "" || v["platform"] == "" {
		t.Errorf("version --json: %v", r)
	}
}

// demoFence returns the fence that re's one group matches in the demo's
// output, as digits.
func demoFence(t *testing.T, out, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo output lacks %s:\n%s", re, out)
	}
	return m[1]
}
