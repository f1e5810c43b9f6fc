//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/task"
)

// A real executor process is killed (SIGKILL) mid-task; another executor
// resumes once the dead one's lease lapses by the database clock, skips the
// dead one's recorded steps and finishes, and no step is stored twice.
func TestKilledExecutorProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		fs, dsn := b.OpenDSN(t)
		killScenario(t, bin, dsn, fs)
	})
}

func killScenario(t *testing.T, bin, dsn string, fs *fence.Store) {
	ctx := context.Background()
	ts, err := task.New(fs, task.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Create(ctx, "killed", task.Plan{Model: "m"}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-dsn", dsn, "-prefix", fs.Prefix(), "-ttl", "1s", "-exec", "killed", "-hang-after", "read")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hung := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "HANGING") {
				hung <- sc.Text()
			}
		}
	}()
	select {
	case line := <-hung:
		t.Log("executor process: " + line)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("executor process never reached its hang point")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	var eb task.Epoch
	deadline := time.Now().Add(30 * time.Second)
	for {
		eb, err = ts.Resume(ctx, "killed")
		if err == nil {
			break
		}
		if !errors.Is(err, fence.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("resume: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tl := newTimeline(false)
	r := (&executor{who: "B", tasks: ts, model: model{"m", 5 * time.Millisecond}, tl: tl}).run(ctx, eb, steps)
	if r.completeErr != nil || len(r.recorded) != 2 {
		for _, l := range tl.lines {
			t.Log(l)
		}
		t.Fatalf("resumed executor: recorded %v, %v", r.recorded, r.completeErr)
	}
	out2 := scenarioOutcome{}
	if err := collect(ctx, ts, "killed", &out2); err != nil {
		t.Fatal(err)
	}
	stepsOnce(t, out2)
	if out2.task.State != task.Succeeded || out2.task.Epoch != eb.Number() {
		t.Fatalf("task %+v", out2.task)
	}
}
