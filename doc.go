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
//	// assign gives item id to owner, as the singleton job "admin:reconciliation"
//	// of every replica that shares the database at dsn: "sqlite:fence.db",
//	// "postgres://app@db/app" or "mysql://app@db:3306/app".
//	func assign(ctx context.Context, dsn string, id int, owner string) (fence.Result, error) {
//		store, err := fencedsn.Open(ctx, dsn)
//		if err != nil {
//			return fence.Result{}, err
//		}
//		defer store.Close()
//		if _, err := store.Migrate(ctx); err != nil {
//			return fence.Result{}, err
//		}
//		return fence.Run(ctx, store, "admin:reconciliation", func(ctx context.Context) error {
//			tok, _ := fence.TokenFrom(ctx)
//			// The fence predicate goes where {{fence}} stands: check and write are one statement.
//			_, err := store.Exec(ctx, tok,
//				`UPDATE items SET owner = ? WHERE id = ? AND {{fence}}`, owner, id)
//			return err // errors.Is(err, fence.ErrLost) once a newer owner took over
//		}, fence.WithTTL(30*time.Second))
//		// Result.Outcome: completed, failed, not-acquired, lost or rejected
//	}
//
// The sample opens its store from a DSN with fencedsn.Open, which links all
// three drivers. A program that knows its database links only that driver:
// it makes the driver from its own handle — postgres.New(db, ""),
// mysql.New, sqlite.New, or postgres.NewPool(pool, "") for pgx's own pool —
// and calls New. The root package imports no database driver. Fenced writes
// with pgx's types are in package fencepgx (docs/adr/0003-pgx-native-store.md);
// ExecWith and CheckWith serve any other client library.
//
// # Leader election
//
// Elect is leader election with fencing, modelled on client-go's
// leaderelection: every replica calls Elect with the same lease name and
// ElectionCallbacks; at most one leads at any instant of the database
// clock. OnStartedLeading(ctx, tok) runs while this replica leads, with the
// term's token for fenced writes; ctx is cancelled, with a cause wrapping
// ErrLost, when a renewal is refused or none succeeded within the renew
// deadline, before the lease can lapse. When Elect's ctx ends the lease is
// released once OnStartedLeading returned, so a successor need not wait
// out the TTL. After a term ends, OnStoppedLeading is called (after the
// leader's ctx is done and OnStartedLeading returned) and Elect campaigns
// again. OnNewLeader(identity, fence) reports each term observed. The
// callbacks are never called concurrently. As with Run, only writes that
// carry the token are fenced.
//
// # What fence guarantees
//
//   - At any instant of the database clock at most one (owner, fence) pair is
//     valid for a lease name.
//   - Fences for a name strictly increase and are never reused.
//   - A fenced write (Store.Exec, Store.InTx, Store.CheckTx, FinishRun, and
//     their counterparts ExecWith, CheckWith and fencepgx's) carrying fence f
//     never commits after an acquisition of a fence above f
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
//
// # Fenced writes: the SQL that is accepted
//
// Exec, ExecIn, ExecWith and Fenced put the fence predicate where the
// statement says {{fence}}. fence does not parse SQL: it tokenizes it as the
// dialect does (literals, quoted names, comments) and accepts only the shapes
// in which the predicate guards every row the statement writes. Anything
// else is refused with ErrInvalid, saying why and what to write, before
// anything is sent. c stands for the caller's own condition.
//
//	statement                                                  verdict
//	---------------------------------------------------------  -------------------------------------------
//	UPDATE t SET … WHERE c AND {{fence}}                        fenced (also with RETURNING, ORDER BY, LIMIT)
//	DELETE FROM t WHERE c AND {{fence}}                         fenced
//	INSERT INTO t (…) SELECT … WHERE c AND {{fence}}            fenced; ON CONFLICT … / ON DUPLICATE KEY
//	                                                              UPDATE … may follow the guarded SELECT
//	REPLACE INTO / INSERT OR REPLACE INTO t SELECT … WHERE …    fenced, marker as for INSERT … SELECT
//	WITH q AS (SELECT …) UPDATE | DELETE | INSERT …             fenced: CTEs that only read
//	WHERE (a OR b) AND {{fence}}   … ;                          fenced: OR in parentheses, one trailing ;
//	WHERE a OR b AND {{fence}}                                  refused: top-level OR (MySQL: also XOR, ||)
//	                                                              guards one side; parenthesise the condition
//	{{fence}} inside ( ), a subquery, a function, CASE, or in   refused: the marker must be a top-level AND
//	  SET, ON, HAVING; NOT {{fence}}; {{fence}} = x;              conjunct of the outermost WHERE (for INSERT,
//	  x BETWEEN a AND {{fence}}                                   of the SELECT feeding it)
//	INSERT … VALUES …; the marker in ON CONFLICT … DO UPDATE    refused: the inserted rows are unguarded
//	  … WHERE or in ON DUPLICATE KEY UPDATE
//	WITH q AS (DELETE | UPDATE | INSERT | MERGE …) …            refused: a write the fence does not guard
//	… UNION | INTERSECT | EXCEPT … at the top level             refused: put it in a subquery, guard the outer SELECT
//	SELECT …, MERGE …, DDL                                      refused: not a write fence can guard
//	stmt; stmt                                                  refused: one statement per call
//	placeholders ≠ arguments; $1, $3 without $2; ? with $n      refused
//	SQLite ?NNN, :name, @name, $name; $n on SQLite or MySQL     refused: use ?
//	MySQL /*! … */ (run by the server as SQL)                   refused
//	CheckTx / CheckWith, then the transaction's writes          fenced until commit, if called at the top level
//	CheckTx inside a SAVEPOINT that is then rolled back         NOT fenced on PostgreSQL and MariaDB/MySQL: the
//	                                                              rollback releases the lock (fencepgx.CheckTx refuses
//	                                                              pgx's nested transactions); call CheckTx at the
//	                                                              top level of the transaction, not inside a
//	                                                              savepoint you may roll back, or use ExecIn with
//	                                                              {{fence}} on each write. SQLite: fenced (the
//	                                                              transaction's write lock stays)
//
// Placeholders: write ? on every database. On PostgreSQL a statement with ?
// and no $n has its ? rebound to $1, $2, …; $n works too, but not both in one
// statement. Every ? outside literals and comments counts as a placeholder,
// so write jsonb's ?, ?| and ?& operators as jsonb_exists, jsonb_exists_any
// and jsonb_exists_all. fence adds its own
// arguments after or between the caller's. The tokenizer assumes the
// servers' default quoting: PostgreSQL standard_conforming_strings on,
// MySQL without NO_BACKSLASH_ESCAPES.
package fence
