// Package fencegocron runs github.com/go-co-op/gocron/v2 jobs on several
// replicas that share one database, under fence leases, and hands each run
// the fence token of its lease so that its writes can be fenced: a run that
// lost its lease — it paused, was partitioned, was replaced — cannot commit
// after another replica took over.
//
// Locker (gocron.WithDistributedLocker) lets one replica run each slot of
// a job: before a run every scheduler tries the job's lease, and the one
// that gets it runs. Elector (gocron.WithDistributedElector) lets only the
// leader run jobs at all. Both offer Job, which turns a function of
// (ctx, token) into a gocron task:
//
//	// scheduleReport runs on every replica: each minute's report is written by
//	// one of them, and a replica that lost its lease mid-run cannot overwrite a
//	// newer one. Stop the scheduler with Shutdown.
//	func scheduleReport(store *fence.Store, body string) (gocron.Scheduler, error) {
//		locker, err := fencegocron.NewLocker(store, fencegocron.WithMinHold(30*time.Second))
//		if err != nil {
//			return nil, err
//		}
//		sched, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//		if err != nil {
//			return nil, err
//		}
//		_, err = sched.NewJob(gocron.CronJob("* * * * *", false),
//			gocron.NewTask(locker.Job(func(ctx context.Context, tok fence.Token) error {
//				_, err := store.Exec(ctx, tok,
//					`UPDATE reports SET body = ? WHERE id = 1 AND {{fence}}`, body)
//				return err // wraps fence.ErrLost if another replica took over
//			})),
//			gocron.WithName("report")) // the lease is "gocron:report"
//		if err != nil {
//			return nil, err
//		}
//		sched.Start()
//		return sched, nil
//	}
//
// # What it guarantees
//
//   - Locker: at most one scheduler holds a job's lease at any instant of
//     the database clock. The lease is renewed while the job runs (every
//     TTL/3), and the job's context is cancelled, with a cause wrapping
//     fence.ErrLost, the moment a renewal is refused or none succeeded
//     within the renew deadline; a fenced write with the run's token is
//     refused once a newer run acquired the lease.
//   - Locker: each locked run is a row of the run ledger (Store.Runs) with
//     the lease's fence: Lock starts it, Unlock finishes it with fenced
//     completion. A task from Job records its own outcome (succeeded, or
//     failed with its error or panic); gocron does not tell a Locker how
//     any other task ended, so such a run is recorded succeeded once gocron
//     unlocks it with the lease held. A run whose lease was lost is lost.
//   - Elector: built on fence.Elect. IsLeader says yes only while the lease is held and was
//     renewed within the renew deadline on the local monotonic clock, which
//     is below the TTL: an old leader stops saying yes before a new one can
//     be elected. Each term has a new fence (Token, Job).
//
// # What it does not guarantee
//
//   - Exactly one run per slot. gocron does not tell the Locker which slot a
//     run is for, so a slot is only "a run within the minimum hold of the
//     winner's" (WithMinHold): a replica whose timer fires later than that
//     runs the slot again. Use CronJob (all replicas fire on the same clock
//     instants) or align DurationJob starts (gocron.WithStartAt), and keep
//     the hold above the spread of the timers and below the period.
//   - With an Elector, a run the old leader started can still be running
//     when the new leader starts the next one; only its fenced writes are
//     stopped. gocron ignores the Locker when an Elector is set, so the two
//     cannot be combined in one scheduler.
//   - Side effects that do not carry the token are not fenced (see package
//     fence), and cancellation of the job's context is a signal, not a
//     fence.
//   - A task not made with Job still gets the exclusion, but not the token.
package fencegocron
