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
	"github.com/fencekit/fence/task"
)

func main() {
	dsn := flag.String("dsn", "", "database (default: SQLite in a temporary directory)")
	ttl := flag.Duration("ttl", 800*time.Millisecond, "executor lease TTL")
	flag.Parse()
	if err := run(*dsn, *ttl); err != nil {
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
	fs, err := fence.Open(ctx, dsn)
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
