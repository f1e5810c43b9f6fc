package zombie

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencemcp"
	"github.com/fencekit/fence/fencemcp/internal/harness"
	"github.com/fencekit/fence/internal/teststore"
)

// TestZombieSIGSTOP is the paused agent as a real process: the agent runs
// in a child process that calls the MCP server over streamable HTTP; it is
// SIGSTOPped after its first step, its lease lapses and another worker
// resumes and finishes the task, and the agent is SIGCONTed with its next
// call already queued. Fenced, every call after the thaw is refused;
// the control (no fencemcp, no ledger) commits them and is caught.
func TestZombieSIGSTOP(t *testing.T) {
	for _, sdk := range []string{harness.GoSDK, harness.MCPGo} {
		for _, fenced := range []bool{true, false} {
			mode := map[bool]string{true: "fenced", false: "control"}[fenced]
			t.Run(sdk+"/"+mode, func(t *testing.T) {
				w := newWorld(t, teststore.SQLite.Open(t), sdk, harness.HTTP, fenced)
				id := "sigstop"
				a := w.start(id, w.a)
				child := startChild(t, sdk, w.a.URL(), w.key, a.e.Token, fenced)
				if got := child.call(t, "s0"); got != "done" {
					t.Fatalf("child's first step: %s", got)
				}
				child.stop(t)
				// The next call waits in the stopped process's stdin.
				fmt.Fprintln(child.in, "call s1")
				b := w.lapseAndResume(id, w.b)
				if st := b.run(context.Background(), 0, steps); st != done {
					t.Fatalf("the new worker's run: %v", st)
				}
				if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				got := []string{child.read(t), child.call(t, "s2")}
				want := map[bool]string{true: "refused", false: "done"}[fenced]
				for i, g := range got {
					if g != want {
						t.Fatalf("thawed agent's call %d: %s, want %s", i+1, g, want)
					}
				}
				child.in.Close()
				if err := child.cmd.Wait(); err != nil {
					t.Fatalf("child: %v", err)
				}
				w.mu.Lock()
				v := check(w.history)
				h := describe(w.history)
				w.mu.Unlock()
				bad := !v.Linearizable || v.Stale > 0 || v.Duplicates > 0
				t.Logf("zombie sigstop %s %s: linearizable %v, %d stale, %d duplicate effects", sdk, mode, v.Linearizable, v.Stale, v.Duplicates)
				if bad == fenced {
					t.Fatalf("%s: linearizable %v, %d stale, %d duplicates\n%s", mode, v.Linearizable, v.Stale, v.Duplicates, h)
				}
			})
		}
	}
}

type childAgent struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startChild(t *testing.T, sdk, url string, key []byte, tok fence.Token, fenced bool) *childAgent {
	cmd := exec.Command(os.Args[0], "-test.run=^TestZombieChildAgent$", "-test.v")
	cmd.Env = append(os.Environ(), "ZOMBIE_CHILD=1", "ZOMBIE_SDK="+sdk, "ZOMBIE_URL="+url,
		"ZOMBIE_KEY="+hex.EncodeToString(key), "ZOMBIE_TOKEN="+tok.String(), fmt.Sprintf("ZOMBIE_FENCED=%v", fenced))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &childAgent{cmd: cmd, in: in, out: bufio.NewScanner(out)}
}

func (c *childAgent) call(t *testing.T, step string) string {
	fmt.Fprintln(c.in, "call "+step)
	return c.read(t)
}

// read returns the status of the child's next answer line ("result sN X").
func (c *childAgent) read(t *testing.T) string {
	for c.out.Scan() {
		if f := strings.Fields(c.out.Text()); len(f) == 3 && f[0] == "result" {
			return f[2]
		}
	}
	t.Fatalf("child agent ended: %v", c.out.Err())
	return ""
}

// stop SIGSTOPs the child and waits until the kernel reports it stopped.
func (c *childAgent) stop(t *testing.T) {
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the parenthesised command name.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i+1:]), " T") {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the child agent did not stop within a minute")
}

// TestZombieChildAgent is the agent process of TestZombieSIGSTOP: it reads
// "call sN" lines and answers "result sN done|refused|lost|error".
func TestZombieChildAgent(t *testing.T) {
	if os.Getenv("ZOMBIE_CHILD") != "1" {
		t.Skip("the agent process of TestZombieSIGSTOP")
	}
	ctx := context.Background()
	key, err := hex.DecodeString(os.Getenv("ZOMBIE_KEY"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := fence.ParseToken(os.Getenv("ZOMBIE_TOKEN"))
	if err != nil {
		t.Fatal(err)
	}
	fenced := os.Getenv("ZOMBIE_FENCED") == "true"
	var st *fencemcp.Stamper
	if fenced {
		if st, err = fencemcp.NewStamper(key, true); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := harness.Dial(ctx, os.Getenv("ZOMBIE_SDK"), os.Getenv("ZOMBIE_URL"), st)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	taskID := strings.TrimPrefix(tok.Lease, "task:")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		step, ok := strings.CutPrefix(in.Text(), "call ")
		if !ok {
			continue
		}
		a := harness.Args{Payload: taskID, Step: step}
		cctx := ctx
		if fenced {
			cctx = fencemcp.WithCall(ctx, tok, step)
		} else {
			a.Epoch = tok.Fence
		}
		out, err := conn.Call(cctx, a)
		status := "done"
		switch {
		case err != nil:
			status = "lost"
		case out.Refused:
			status = "refused"
		case out.IsError:
			status = "error"
		}
		fmt.Printf("result %s %s\n", step, status)
	}
}
