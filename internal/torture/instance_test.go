package torture

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A private MariaDB must leave the shared server's temporary tables alone: a
// starting mariadbd deletes every #sql* file in its tmpdir, and the torture
// restart fault starts one while other packages' tests use the shared server
// (whose tmpdir is /tmp, or $TMPDIR). The probe is what such a table looks
// like on disk; the oracle is the real server's startup.
func TestPrivateMariaDBLeavesSharedTmpAlone(t *testing.T) {
	if _, err := exec.LookPath("mariadbd"); err != nil {
		if _, err := os.Stat("/usr/sbin/mariadbd"); err != nil {
			t.Skip("mariadbd not installed")
		}
	}
	if testing.Short() {
		t.Skip("starts a private MariaDB (~10 s)")
	}
	var probes []string
	for _, dir := range []string{"/tmp", os.TempDir()} {
		f, err := os.CreateTemp(dir, "#sql-fence-probe-*.MAI")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		probes = append(probes, f.Name())
		t.Cleanup(func() { os.Remove(f.Name()) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, err := newMariaInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range probes {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the private MariaDB deleted %s, a file of the shared server's tmpdir: %v", filepath.Base(p), err)
		}
	}
}
