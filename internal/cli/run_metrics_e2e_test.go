package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fence run --metrics-push PUTs the run's metrics to the Pushgateway once
// the command has ended, in this host's and lease's group.
func TestRunPushesMetrics(t *testing.T) {
	b := sqliteOnly(t)
	var (
		mu     sync.Mutex
		method string
		path   string
		body   string
		refuse bool // answer 502, as a Pushgateway that is down
	)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bs, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			http.Error(w, "no", http.StatusBadGateway)
			return
		}
		method, path, body = r.Method, r.URL.Path, string(bs)
		w.WriteHeader(http.StatusOK)
	}))
	defer gw.Close()
	if r := b.fence(t, "run", "--lease", "pushed", "--metrics-push", gw.URL, "--", "true"); r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	host, _ := os.Hostname()
	mu.Lock()
	defer mu.Unlock()
	// Checked under mu: a keep-alive connection of the gateway may still be
	// serving when the command has ended.
	// The grouping labels come in any order.
	a, c := "/instance/"+host, "/fence_lease/pushed"
	if method != http.MethodPut || (path != "/metrics/job/fence_run"+a+c && path != "/metrics/job/fence_run"+c+a) {
		t.Fatalf("push: %s %s, want PUT /metrics/job/fence_run%s%s", method, path, a, c)
	}
	for _, want := range []string{
		`fence_run_starts_total{lease="pushed"} 1`,
		`fence_runs_finished_total{lease="pushed",status="succeeded"} 1`,
		`fence_jobs_running{lease="pushed"} 0`,
		`fence_job_duration_seconds_count{lease="pushed",status="succeeded"} 1`,
		`fence_job_last_success_timestamp_seconds{lease="pushed"} `,
		`fence_acquire_total{lease="pushed",outcome="acquired"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("pushed body lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "go_goroutines") {
		t.Errorf("pushed body has this process's runtime metrics:\n%s", body)
	}

	// A Pushgateway that refuses is a warning: the command's outcome stands.
	// (Not by swapping gw.Config.Handler: its connections read it unlocked.)
	refuse = true
	mu.Unlock()
	defer mu.Lock()
	r := b.fence(t, "run", "--lease", "pushed", "--metrics-push", gw.URL, "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "--metrics-push") {
		t.Fatalf("run with a refusing Pushgateway: %v", r)
	}
	// Its warning names the URL without the password in it (before, the
	// push's error quoted the URL whole, user:password included).
	withPW := strings.Replace(gw.URL, "://", "://pusher:Pa55%2Fw0rd@", 1)
	r = b.fence(t, "--log-level", "warn", "run", "--lease", "pushed", "--metrics-push", withPW, "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "pusher:xxxxx@") {
		t.Fatalf("run with a refusing Pushgateway and a password in its URL: %v", r)
	}
	for _, f := range []string{"Pa55", "w0rd"} {
		if strings.Contains(r.stdout+r.stderr, f) {
			t.Errorf("output shows the Pushgateway password (%q): %v", f, r)
		}
	}
	// Not a URL: a usage error before any lease is taken.
	if r := b.fence(t, "run", "--lease", "pushed", "--metrics-push", "pushgateway:9091", "--", "true"); r.code != ExitUsage {
		t.Fatalf("--metrics-push without a scheme: %v", r)
	}
}

// fence run --metrics-textfile writes the run's metrics for node exporter's
// textfile collector, replacing the file whole and leaving nothing else in
// the directory.
func TestRunWritesMetricsTextfile(t *testing.T) {
	b := sqliteOnly(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "fence_nightly.prom")
	if err := os.WriteFile(path, []byte("stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := b.fence(t, "run", "--lease", "nightly", "--metrics-textfile", path, "--", "false"); r.code != 1 {
		t.Fatalf("run: %v", r)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# TYPE fence_runs_finished_total counter\n",
		`fence_runs_finished_total{lease="nightly",status="failed"} 1` + "\n",
		`fence_job_duration_seconds_count{lease="nightly",status="failed"} 1` + "\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("textfile lacks %q:\n%s", want, got)
		}
	}
	if strings.HasPrefix(string(got), "stale") || strings.Contains(string(got), "go_goroutines") {
		t.Errorf("textfile:\n%s", got)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("textfile mode: %v, %v; want 0644 so node exporter can read it", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the textfile: %v", len(ents), ents)
	}
	for _, bad := range []string{filepath.Join(dir, "x.txt"), filepath.Join(dir, "missing", "x.prom")} {
		if r := b.fence(t, "run", "--lease", "nightly", "--metrics-textfile", bad, "--", "true"); r.code != ExitUsage {
			t.Fatalf("--metrics-textfile %s: %v", bad, r)
		}
	}
}
