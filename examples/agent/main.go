// Command agent simulates long-running agent tasks whose executors are
// superseded — a model switch, a cancel and resume, a crash — and shows that
// only the current epoch's tool results and summary are stored.
//
//	go run ./examples/agent                 # embedded SQLite in a temp dir
//	go run ./examples/agent -dsn postgres://…
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/task"
)

func main() {
	dsn := flag.String("dsn", "", "database (default: SQLite in a temporary directory)")
	ttl := flag.Duration("ttl", 800*time.Millisecond, "executor lease TTL")
	prefix := flag.String("prefix", fence.DefaultPrefix, "table prefix")
	execTask := flag.String("exec", "", "run as one executor of this task id and stop after -hang-after (for the crash test)")
	hangAfter := flag.String("hang-after", "read", "with -exec: the step after which the executor hangs, to be killed")
	flag.Parse()
	var err error
	if *execTask != "" {
		err = execute(*dsn, *prefix, *ttl, *execTask, *hangAfter)
	} else {
		err = run(*dsn, *ttl)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run(dsn string, ttl time.Duration) error {
	ctx := context.Background()
	if dsn == "" {
		dir, err := os.MkdirTemp("", "fence-agent-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dsn = "sqlite:" + filepath.Join(dir, "agent.db")
	}
	fs, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer fs.Close()
	if _, err := fs.Migrate(ctx); err != nil {
		return err
	}
	ts, err := task.New(fs, task.WithTTL(ttl))
	if err != nil {
		return err
	}
	suffix := fmt.Sprintf("-%d", time.Now().UnixNano())
	for _, sc := range []struct {
		title string
		run   func(*timeline) (scenarioOutcome, error)
	}{
		{"1. model switch mid-task", func(tl *timeline) (scenarioOutcome, error) { return modelSwitch(ctx, ts, "switch"+suffix, tl) }},
		{"2. cancel and resume", func(tl *timeline) (scenarioOutcome, error) { return cancelResume(ctx, ts, "cancel"+suffix, tl) }},
		{"3. executor crash, resumed after its lease lapsed", func(tl *timeline) (scenarioOutcome, error) {
			return crashResume(ctx, ts, ttl, "crash"+suffix, tl)
		}},
	} {
		fmt.Printf("\n== %s\n", sc.title)
		out, err := sc.run(newTimeline(true))
		if err != nil {
			return err
		}
		fmt.Printf("   stored: state=%s epoch=%d summary=%q\n", out.task.State, out.task.Epoch, out.task.Summary)
		for _, s := range out.steps {
			fmt.Printf("   step %-7s epoch %d  %s\n", s.Key, s.Epoch, s.Result)
		}
	}
	return nil
}

// execute is one executor process: it starts the task, records steps until
// hangAfter, says so on stdout and then hangs mid-step (neither renewing nor
// releasing) until it is killed.
func execute(dsn, prefix string, ttl time.Duration, id, hangAfter string) error {
	ctx := context.Background()
	fs, err := fencedsn.Open(ctx, dsn, fence.WithPrefix(prefix))
	if err != nil {
		return err
	}
	ts, err := task.New(fs, task.WithTTL(ttl))
	if err != nil {
		return err
	}
	e, err := ts.Start(ctx, id)
	if err != nil {
		return err
	}
	x := &executor{who: "A", tasks: ts, model: model{"m", 10 * time.Millisecond}, tl: newTimeline(true),
		afterStep: func(step string) {
			if step == hangAfter {
				fmt.Printf("HANGING after %s at epoch %d\n", step, e.Number())
				select {}
			}
		}}
	x.run(ctx, e, steps)
	return fmt.Errorf("executor finished without reaching step %q", hangAfter)
}
