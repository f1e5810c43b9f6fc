package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencepgx"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/postgres"
)

// pauseHelperEnv makes the test binary run as TestPauseHelper's takeover
// process instead of as a test.
const pauseHelperEnv = "FENCE_TEST_PAUSE_HELPER"

// A job stopped past its TTL (SIGSTOP stops every goroutine, the renewal
// keeper's too) while another process took its lease over, resumes in the
// middle of its work and writes with the context Run gave it. The keeper
// has not yet run to cancel that context, but its deadline has passed: the
// write must not be sent, and its error is definite and says why (ErrLost,
// the runner's cause). Before, the write went out, the keeper's timer
// cancelled the context while the statement was in flight, and the job got
// ErrAmbiguous wrapping context.Canceled, the cause only in
// context.Cause(ctx). One round each: Exec, InTx (fencepgx.InTx on pgx's
// pool), ExecIn (fencepgx.Exec).
//
// The backends run one after another: the pause stops the whole test
// process.
func TestJobWriteAfterPauseIsDefinite(t *testing.T) {
	testdb.Long(t)
	// One P: after the resume, the job's goroutine runs on until it waits
	// for the network, and the keeper's overdue timer cannot run before
	// the write is decided, as on a busy machine. With more, which of the
	// two runs first is a race.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, b := range teststore.WithPgx() {
		t.Run(b.Name, func(t *testing.T) {
			s, dsn := b.OpenDSN(t)
			ctx := context.Background()
			table := testdb.WorkTable(t, s.Prefix(), func(ctx context.Context, q string) error { _, err := exec(ctx, s, q); return err })
			if _, err := exec(ctx, s, "INSERT INTO "+table+" (id, v) VALUES (1, 0)"); err != nil {
				t.Fatal(err)
			}
			write := s.Rebind("UPDATE " + table + " SET v = v + 1 WHERE id = ? AND {{fence}}")
			plain := s.Rebind("UPDATE " + table + " SET v = v + 1 WHERE id = ?")
			// The job's write, one kind per round.
			writes := []func(ctx context.Context, tok fence.Token) error{
				func(ctx context.Context, tok fence.Token) error { _, err := s.Exec(ctx, tok, write, 1); return err },
				func(ctx context.Context, tok fence.Token) error {
					if d, ok := s.Driver().(*postgres.Driver); ok && d.Pool() != nil {
						return fencepgx.InTx(ctx, s, d.Pool(), tok, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, plain, 1); return err })
					}
					return s.InTx(ctx, tok, func(tx *sql.Tx) error { _, err := tx.ExecContext(ctx, plain, 1); return err })
				},
				func(ctx context.Context, tok fence.Token) error {
					if d, ok := s.Driver().(*postgres.Driver); ok && d.Pool() != nil {
						_, err := fencepgx.Exec(ctx, s, d.Pool(), tok, write, 1)
						return err
					}
					_, err := s.ExecIn(ctx, s.DB(), tok, write, 1)
					return err
				},
			}
			for round := 1; round <= len(writes); round++ {
				name := "paused-" + strconv.Itoa(round)
				var writeErr error
				var helper func() string
				res, err := fence.Run(ctx, s, name, func(ctx context.Context) error {
					tok, _ := fence.TokenFrom(ctx)
					helper = stopUntilTakenOver(t, dsn, s.Prefix(), name)
					// The first thing after the resume.
					writeErr = writes[round-1](ctx, tok)
					return writeErr
				}, fence.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("round %d: %s; the write after the pause: %v; run %s", round, helper(), writeErr, res.Outcome)
				if writeErr == nil || errors.Is(writeErr, fence.ErrAmbiguous) || !errors.Is(writeErr, fence.ErrLost) ||
					!strings.Contains(writeErr.Error(), "not sent") {
					t.Errorf("round %d: write after a pause past the TTL: %v; want a definite error, not sent, wrapping ErrLost", round, writeErr)
				}
			}
			// Nothing was written: v + 0 = 0 matches the row only if it is unchanged.
			if n, err := exec(ctx, s, "UPDATE "+table+" SET v = v + 0 WHERE id = 1 AND v = 0"); err != nil || n != 1 {
				t.Errorf("the stale writes changed the row (%d rows still at 0): %v", n, err)
			}
		})
	}
}

// stopUntilTakenOver stops this process (SIGSTOP) after starting a helper
// process that waits for the stop, takes lease name over once it lapses,
// and then resumes this process (SIGCONT). It returns without waiting for
// the helper to exit; the function it returns does, and gives what the
// helper printed.
func stopUntilTakenOver(t *testing.T, dsn, prefix, name string) func() string {
	t.Helper()
	var out strings.Builder
	cmd := osexec.Command(os.Args[0], "-test.run=^TestPauseHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		pauseHelperEnv+"=1",
		"FENCE_TEST_PAUSE_DSN="+dsn,
		"FENCE_TEST_PAUSE_PREFIX="+prefix,
		"FENCE_TEST_PAUSE_LEASE="+name,
		"FENCE_TEST_PAUSE_PID="+strconv.Itoa(os.Getpid()))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The helper resumes this process on every path it can take; it
	// returns (and so it can be waited for) only after that. The signal
	// goes to this thread, which takes it on its way out of the system
	// call: sent to the process, another thread could take it while this
	// one runs on into the write.
	runtime.LockOSThread()
	err := syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	return func() string {
		if err := cmd.Wait(); err != nil {
			t.Errorf("pause helper: %v\n%s", err, out.String())
		}
		return strings.TrimSpace(out.String())
	}
}

// TestPauseHelper is the takeover process of TestJobWriteAfterPauseIsDefinite:
// it waits until the test process is stopped, acquires the lease once it
// lapsed, and resumes the test process. It does nothing as a test.
func TestPauseHelper(t *testing.T) {
	if os.Getenv(pauseHelperEnv) != "1" {
		t.Skip("the takeover process of TestJobWriteAfterPauseIsDefinite")
	}
	pid, err := strconv.Atoi(os.Getenv("FENCE_TEST_PAUSE_PID"))
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens here, the test process must not stay stopped.
	defer syscall.Kill(pid, syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !stopped(pid) {
		if ctx.Err() != nil {
			t.Fatal("the test process did not stop within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	s, err := fencedsn.Open(ctx, os.Getenv("FENCE_TEST_PAUSE_DSN"), fence.WithPrefix(os.Getenv("FENCE_TEST_PAUSE_PREFIX")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.AcquireWait(ctx, os.Getenv("FENCE_TEST_PAUSE_LEASE"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("took the lease over with fence %d\n", l.Token.Fence)
}

// stopped reports whether process pid is stopped by a signal (state T in
// /proc/pid/stat).
func stopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}
