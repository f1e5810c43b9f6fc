package nemesis

import (
	"context"
	"sync"
	"time"
)

// Runner plays a schedule on a Net.
type Runner struct {
	Net Net
	Rec *Record
	// Log, when set, is told every action as it happens (progress output).
	Log func(Event, Step)

	mu     sync.Mutex
	counts map[string]int
}

// Run plays the schedule from now until it ends or ctx is done, and heals
// every cut before it returns, whatever happened (with a context of its
// own: a cancelled run must not leave a cut behind). The returned error is
// the first failure to cut or heal; the schedule goes on after a failed
// cut (it is recorded), not after a failed heal.
func (r *Runner) Run(ctx context.Context) (err error) {
	start := time.Now()
	defer func() {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if herr := r.Net.Heal(hctx); herr != nil && err == nil {
			err = herr
		}
	}()
	wait := func(until time.Duration) bool {
		d := until - time.Since(start)
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for i, s := range r.Rec.Steps {
		at := s.At
		for f := 0; f < max(s.Flaps, 1); f++ {
			if !wait(at) {
				return nil
			}
			what := "cut"
			for _, c := range s.Cuts {
				if cerr := r.Net.Drop(ctx, c[0], c[1]); cerr != nil {
					what = "error: " + cerr.Error()
					if err == nil {
						err = cerr
					}
				}
			}
			r.note(i, s, what, time.Since(start))
			if f == 0 {
				r.mu.Lock()
				if r.counts == nil {
					r.counts = map[string]int{}
				}
				r.counts[s.Kind]++
				r.mu.Unlock()
			}
			at += s.Hold
			ok := wait(at)
			if herr := r.Net.Heal(context.WithoutCancel(ctx)); herr != nil {
				r.note(i, s, "error: "+herr.Error(), time.Since(start))
				return herr
			}
			r.note(i, s, "heal", time.Since(start))
			if !ok {
				return nil
			}
			at += s.Gap
		}
	}
	return err
}

func (r *Runner) note(i int, s Step, what string, t time.Duration) {
	e := Event{T: t, Step: i, What: what}
	r.mu.Lock()
	r.Rec.Applied = append(r.Rec.Applied, e)
	r.mu.Unlock()
	if r.Log != nil {
		r.Log(e, s)
	}
}

// Counts returns how many steps of each kind were started.
func (r *Runner) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.counts))
	for k, v := range r.counts {
		m[k] = v
	}
	return m
}
