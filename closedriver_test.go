package fence_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/sqlite"
)

// New's doc says a driver closed after New breaks the store (issue 29: a
// reader closed it with a defer next to New's). This is what they see.
func TestClosingTheDriverBreaksTheStore(t *testing.T) {
	ctx := t.Context()
	drv, err := sqlite.OpenDriver(filepath.Join(t.TempDir(), "x.db"), "")
	if err != nil {
		t.Fatal(err)
	}
	store, err := fence.New(ctx, drv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = store.Acquire(ctx, "job", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "database is closed") {
		t.Fatalf("Acquire after the driver's Close: %v, want an error saying the database is closed", err)
	}
}
