package cli

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A job running as fence's own user reads every /proc/<pid>/environ it can.
// Before, fence's showed FENCE_DSN whole (the kernel serves the environment
// fence was started with, whatever fence does to its copy later); fence now
// makes itself non-dumpable, so the job reads its own environment and not
// fence's. As root the test runs fence and the job as nobody: a job running
// as root can read any process's environment.
func TestJobCannotReadFenceEnviron(t *testing.T) {
	dir, err := os.MkdirTemp("", "fence-environ-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "fence")
	copyFile(t, fenceBin, bin, 0o755)
	// The marker stands for a password: a SQLite DSN is enough to carry it.
	const marker = "envmarkerPw7"
	dsn := "sqlite:" + filepath.Join(dir, marker+".db")
	fence := func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "FENCE_DSN=" + dsn, "JOBMARK=" + marker}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	if _, errs, err := fence("migrate"); err != nil {
		t.Fatalf("migrate: %v %s", err, errs)
	}
	// The job's own environment has JOBMARK (not stripped, not FENCE_*): it
	// proves the job can read an environ it is allowed to. "fence" lines are
	// environments with FENCE_DSN in them, fence's own.
	const job = `for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done | sort -u | grep -e '^JOBMARK=' -e '^FENCE_DSN=' | sed 's/=.*//'`
	out, errs, err := fence("run", "--lease", "environ", "--", "sh", "-c", job)
	if err != nil {
		t.Fatalf("run: %v\n%s%s", err, out, errs)
	}
	if !strings.Contains(out, "JOBMARK") {
		t.Fatalf("the job could not read its own environment, the test proves nothing: %q %s", out, errs)
	}
	if strings.Contains(out, "FENCE_DSN") {
		t.Errorf("the job read FENCE_DSN from another process's /proc/<pid>/environ")
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
