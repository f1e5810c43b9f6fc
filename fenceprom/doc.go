// Package fenceprom exports Prometheus metrics about a fence.Store's leases.
// It has two collectors:
//
//   - Metrics, what one process does: its lease operations and the runs it
//     starts, as the store reports them to it (a fence.Observer);
//   - StoreCollector, what the database knows of every lease and run, read
//     at each scrape (fence serve's /metrics). See StoreCollector below.
//
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
//		store, err := fencedsn.Open(ctx, dsn, fence.WithObserver(m))
//		if err != nil {
//			return fence.Result{}, err
//		}
//		defer store.Close()
//		if _, err := store.Migrate(ctx); err != nil {
//			return fence.Result{}, err
//		}
//		return fence.Run(ctx, store, "nightly-report", job)
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
//	fence_run_starts_total{lease}                runs started in the run ledger
//	fence_runs_finished_total{lease, status}     runs ended: succeeded, failed, or lost
//	                                             (completion refused as stale, or
//	                                             marked lost)
//
// Histograms:
//
//	fence_renew_duration_seconds{lease}          every renewal call, whatever its result
//	                                             (a RenewBatch call: once, lease="")
//	fence_job_duration_seconds{lease, status}    runs this process started, from start
//	                                             to end: succeeded, failed, lost
//	                                             (WithJobBuckets; 100ms to 6h)
//
// Gauges of the runs this process starts:
//
//	fence_jobs_running{lease}                    started and not yet ended
//	fence_job_last_success_timestamp_seconds{lease}
//	                                             Unix time of the last success
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
// refused operation, but it reports its cause when it marks the run lost
// (fence.Event.Cause), and that counts as reason "unproven", whether or
// not the mark reached the database; nothing needs wiring (OnLost is no
// longer needed, and a loss is never counted twice).
// fence_runs_finished_total{status="lost"} counts completions refused as
// stale and runs marked lost by Store.MarkRunLost, which the runner calls
// when it stops its job (after a refused renewal or at the renew deadline);
// a run that was no longer running is not counted again. Runs marked lost
// by Store.SweepRuns are not counted: this process did not run them.
//
// The job metrics are about runs this process started, timed on its local
// clock; a run that ends with an unknown outcome (the completion's answer
// was lost) leaves fence_jobs_running but is not timed.
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
//
// # StoreCollector
//
// NewStoreCollector(store) reads the database at each scrape, in two
// statements (fence.Store.Stats), bounded by a timeout, one scrape at a
// time, and exports every lease and the run ledger, whichever process holds
// or ran them. Register it in one process per database (fence serve does):
//
//	fence_db_lease_state{lease, state}           1 for the lease's state (held, expired,
//	                                             released, revoked), 0 for the others
//	fence_db_lease_fence{lease}                  its fence; changes() counts new holders
//	fence_db_lease_expiry_seconds{lease}         until it lapses (negative after), by
//	                                             the database clock
//	fence_db_lease_holder_info{lease, holder}    1, for a held lease: its holder name
//	                                             (fence.WithHolder, default host:pid; a
//	                                             row from before names were recorded:
//	                                             the owner token's first 8 characters)
//	fence_db_lease_last_success_age_seconds{lease}
//	                                             since its last succeeded run finished
//	fence_db_leases                              lease rows in all
//	fence_db_leases_omitted                      beyond WithMaxLeases (default 1000)
//	fence_db_runs{status}                        runs in the ledger: running, succeeded,
//	                                             failed, lost, abandoned
//	fence_db_lost_runs{reason}                   lost and abandoned runs by reason
//	                                             (fence.LossReasons); "rejected" are the
//	                                             stale completions the ledger refused
//	fence_db_scrape_error                        1 when the read failed (and no other
//	                                             fence_db_ series), else 0
//	fence_db_scrape_duration_seconds             the read's duration
//
// All are gauges: the counts are rows of the ledger, and Store.PruneRuns
// deletes finished runs. The per-lease series cost about 8 series a lease;
// WithMaxLeases exports the first leases by name only. The full owner token
// is never exported: it is the holder's secret.
package fenceprom
