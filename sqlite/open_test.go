package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Several processes opening one new file at once: the first journal_mode
// change answers SQLITE_BUSY without waiting (see busyRetry), which failed
// about 1 in 100 opens before the connector retried it.
func TestConcurrentOpenOfNewFile(t *testing.T) {
	dir := t.TempDir()
	var failed []error
	var mu sync.Mutex
	for round := range 100 {
		file := filepath.Join(dir, fmt.Sprintf("r%d.db", round))
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				db, err := Open(file)
				if err != nil {
					t.Error(err)
					return
				}
				defer db.Close()
				var mode string
				if err := db.QueryRowContext(context.Background(), "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
					mu.Lock()
					failed = append(failed, fmt.Errorf("journal_mode %q: %w", mode, err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	if len(failed) > 0 {
		t.Fatalf("%d of 800 concurrent opens of new files failed; first: %v", len(failed), failed[0])
	}
}

// Open's settings pass CheckSession, on a file and in memory.
func TestCheckSessionOfOpen(t *testing.T) {
	for _, file := range []string{filepath.Join(t.TempDir(), "c.db"), ":memory:"} {
		db, err := Open(file)
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(db, "fence_")
		if err != nil {
			t.Fatal(err)
		}
		if err := d.CheckSession(context.Background()); err != nil {
			t.Errorf("%s: %v", file, err)
		}
		db.Close()
	}
}

// A new database and its -wal and -shm files are readable by their owner
// only: the database holds every holder's owner token. Before, SQLite
// created all three 0644 (less the umask).
func TestNewFileIsPrivate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.db")
	db, err := Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (x TEXT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES ('owner token')"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{file, file + "-wal", file + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("%s: %v (the connection is open in WAL mode: it should exist)", f, err)
		}
		if m := fi.Mode().Perm(); m&0o077 != 0 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(f), m)
		}
	}
}
