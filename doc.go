// Package fence runs singleton jobs on many replicas over one shared SQL
// database, so that a worker that lost its lease can never finish, publish or
// overwrite anything after a newer owner took over.
//
// The lease decides who may start; the fence token decides who may still
// finish. Every successful Acquire of a lease name returns a Token whose
// fence is greater than every fence handed out before for that name (across
// releases, revocations, restarts). Writes that a stale worker must not make
// carry the token and are checked by the database in the same statement or
// transaction as the write:
//
//	store, _ := fence.Open(ctx, "sqlite:fence.db")
//	store.Migrate(ctx)
//	res, _ := fence.Run(ctx, store, "admin:reconciliation", func(ctx context.Context) error {
//		tok, _ := fence.TokenFrom(ctx)
//		_, err := store.Exec(ctx, tok,
//			`UPDATE reports SET body = ? WHERE id = ? AND {{fence}}`, body, id)
//		return err // wraps fence.ErrLost if a newer owner took over
//	})
//
// Programs that use pgx without database/sql open the store over their pool
// with OpenPool; it runs the same SQL (docs/adr/0003-pgx-native-store.md).
//
// # What fence guarantees
//
//   - At any instant of the database clock at most one (owner, fence) pair is
//     valid for a lease name.
//   - Fences for a name strictly increase and are never reused.
//   - A fenced write (Store.Exec, Store.InTx, Store.CheckTx, FinishRun, and
//     their pgx counterparts ExecPgx, InPgxTx, CheckPgxTx) carrying fence f never commits after an acquisition of a fence above f
//     has committed; a refused write changes nothing and says why (ErrLost).
//   - Validity is decided by the database clock only. The application clock
//     is used to give up early (the runner's renew deadline), never to
//     believe a lease valid for longer.
//   - A write whose connection failed mid-commit is reported as ErrAmbiguous,
//     not as success and not as lost.
//
// # What fence does not guarantee
//
//   - Side effects that do not carry the token are not fenced: an HTTP call,
//     a file write, an e-mail, a write to another database. A stale worker
//     can still make them. Give them an idempotency key derived from the
//     token, or make the receiver check the fence itself (ExecResource keeps
//     a fence column on a row of another database).
//   - Cancellation of the job's context when the lease is lost is a signal,
//     not a fence: a paused process can run on for a while after resuming.
//     Only the database check at the write is the fence.
//   - IsHeld and Check are snapshots: a check followed by a separate write
//     is a race.
//   - Jobs are not exactly-once: a job can be cut off after doing part of
//     its work, and the next owner starts again. Fencing makes the stale
//     part unable to commit, not undone.
package fence
