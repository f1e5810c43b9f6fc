// Package fenceprom exports Prometheus metrics about a fence.Store's leases.
// A *Metrics is both the fence.Observer the store reports to and the
// prometheus.Collector you register:
//
//	// withMetrics runs job as the singleton "nightly-report" of the store at
//	// dsn, with the store's metrics registered in reg (serve reg with promhttp).
//	func withMetrics(ctx context.Context, dsn string, reg prometheus.Registerer, job fence.Job) (fence.Result, error) {
//		m := fenceprom.New()
//		if err := reg.Register(m); err != nil {
//			return fence.Result{}, err
//		}
//		store, err := fence.Open(ctx, dsn, fence.WithObserver(m))
//		if err != nil {
//			return fence.Result{}, err
//		}
//		defer store.Close()
//		if _, err := store.Migrate(ctx); err != nil {
//			return fence.Result{}, err
//		}
//		// OnLost also counts jobs stopped at the renew deadline, which no
//		// refused operation reports.
//		return fence.Run(ctx, store, "nightly-report", job, fence.OnLost(m.OnLost))
//	}
//
// # Metrics
//
// Counters:
//
//	fence_acquire_total{lease, outcome}          acquire attempts: acquired, held, error
//	                                             (each attempt of AcquireWait counts)
//	fence_renew_failures_total{lease, reason}    renewals refused (lost) or failed (error),
//	                                             one per token (of a RenewBatch too)
//	fence_leases_lost_total{lease, reason}       tokens of this process found to have lost
//	                                             their lease, once per lease and fence:
//	                                             expired, released, revoked, superseded,
//	                                             missing, unknown, unproven
//	fence_fenced_writes_total{lease, result}     fenced writes (Exec, ExecIn) and fenced
//	                                             transaction checks (InTx, CheckTx):
//	                                             ok, stale, no_match, error
//	fence_runs_total{lease, status}              runs started (running), finished
//	                                             (succeeded, failed, lost) and marked
//	                                             lost (lost)
//
// Histogram:
//
//	fence_renew_duration_seconds{lease}          every renewal call, whatever its result
//	                                             (a RenewBatch call: once, lease="")
//
// Gauges, for the leases this process holds (acquired or renewed through the
// store, and not since released, refused, revoked or lapsed):
//
//	fence_leases_held                            how many
//	fence_lease_fence{lease}                     the fence held
//	fence_lease_expiry_seconds{lease}            seconds until the lease can first lapse
//
// The expiry is counted on the local monotonic clock from the start of the
// last successful acquire or renew call plus its TTL, the earliest moment the
// database can let the lease lapse (the runner's own deadline works the same
// way). A lease whose expiry has passed is no longer reported as held.
//
// # What is and is not seen
//
// Losses are seen where an operation is refused: a renewal (of a RenewBatch
// too), a release, a fenced write or transaction, or the start or fenced
// completion of a run. A runner that stops a job because no renewal
// succeeded within the renew deadline (fence.ErrUnproven) performs no
// refused operation; pass fence.OnLost(m.OnLost) to fence.Run or
// fence.Schedule to count those losses as reason "unproven" (losses also
// seen by the store are not counted twice). fence_runs_total{status="lost"}
// counts completions refused as stale and runs marked lost by
// Store.MarkRunLost, which the runner calls when it stops its job (after a
// refused renewal or at the renew deadline); a run that was no longer
// running is not counted again. Runs marked lost by Store.SweepRuns are not
// counted: this process did not run them.
//
// A RenewBatch call is one sample of fence_renew_duration_seconds with
// lease="" (it has no single lease name); each of its tokens counts under
// its own lease as a renewal would: a refused or failed token (a batch that
// fails as a whole fails every token) in fence_renew_failures_total, a
// refused one in fence_leases_lost_total, a renewed one in the held gauges.
//
// # Cardinality
//
// The lease name is a label, so the number of series grows with the number
// of lease names this process touches: about 20 series per name that is used
// in every way, plus the histogram's buckets. That is what you want for a few
// dozen singleton jobs, and too much for one lease per tenant or shard. With
// WithoutLeaseLabel every series carries lease="" and counts all leases
// together, fence_lease_fence is not exported (a fence of many leases means
// nothing), and fence_lease_expiry_seconds is the soonest expiry of all held
// leases. The process still keeps a small entry per held lease to compute it.
package fenceprom
