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
// # Servers and versions
//
// CI tests PostgreSQL 15, MariaDB 10.11 (and a MariaDB 10.11 Galera
// cluster) and SQLite as linked by modernc.org/sqlite. Leases, runs,
// InTx and CheckTx work on PostgreSQL 13 and later, MariaDB 10.6 and later
// and MySQL 8.0. A {{fence}} statement (Exec, ExecIn, ExecWith, Fenced)
// hands the caller's SQL to fence's tokenizer, whose reading must agree
// with the server's lexer; it is refused (ErrInvalid, naming the server)
// where that agreement was not tested: on PostgreSQL before 13 or after 18
// (the lexer changes of 13 to 18 are all number spellings fence refuses on
// every version), on MariaDB before 10.6 or after 11, and on MySQL, where
// no server runs in CI and the comment forms differ from MariaDB's
// (/*M! */, /*+ */ hints, /*!NNNNN */ versions; postgres and mysql's
// TestLexing tests show the servers' readings). There, fence a write with
// InTx or CheckTx and plain statements.
//
// # Fenced writes: the SQL that is accepted
//
// Exec, ExecIn, ExecWith and Fenced fence the caller's UPDATE, DELETE or
// INSERT … SELECT whose WHERE says {{fence}}. The guard does not go where
// the marker stands: fence puts it where no part of the caller's SQL can
// take rows out from under it (docs/adr/0007-guard-placement.md):
//
//	UPDATE t SET … WHERE <guard> AND (c) [RETURNING … | ORDER BY … LIMIT …]
//	DELETE FROM t WHERE <guard> AND (c) [RETURNING …]
//	INSERT INTO t (…) <the caller's SELECT, whole> bounded by the guard from
//	  outside: a LIMIT that is 0 unless the guard holds (PostgreSQL), a CTE
//	  with a column list (MySQL), a derived table (SQLite)
//
// and the marker becomes a condition that is always true. c stands for the
// caller's whole condition: an OR, XOR or || in it, a CASE, a keyword used
// as a column name, an aggregate or a set operation in the SELECT cannot
// reach outside the guard. What fence still reads from the text is where
// literals, quoted names, comments and the statement end; there it follows
// the servers, and refuses the spellings on which the servers, their
// versions or their settings disagree. Anything refused is refused with
// ErrInvalid, saying why and what to write, before anything is sent.
//
//	statement                                                  verdict
//	---------------------------------------------------------  -------------------------------------------
//	UPDATE t SET … WHERE c AND {{fence}}                        fenced (also with RETURNING, ORDER BY, LIMIT)
//	DELETE FROM t WHERE c AND {{fence}}                         fenced
//	INSERT INTO t (…) SELECT … WHERE c AND {{fence}}            fenced, with aggregates, GROUP BY, HAVING,
//	                                                              DISTINCT, windows, UNION/INTERSECT/EXCEPT;
//	                                                              ON CONFLICT … / ON DUPLICATE KEY UPDATE … and
//	                                                              RETURNING may follow; MySQL needs the column
//	                                                              list (INSERT INTO t (a, b) …)
//	REPLACE INTO / INSERT OR REPLACE INTO t SELECT … WHERE …    fenced, as INSERT … SELECT
//	WITH q AS (SELECT …) UPDATE | DELETE | INSERT …             fenced: CTEs that only read
//	WHERE a OR b AND {{fence}}, {{fence}} in a subquery of      fenced: the guard does not depend on where the
//	  the WHERE, WHERE ({{fence}})                                marker stands in the WHERE
//	{{fence}} outside the WHERE (SET, ON, RETURNING, after an   refused: the marker must be a condition of the
//	  upsert's ON CONFLICT); NOT {{fence}}; {{fence}} = x;        statement's WHERE (of the SELECT feeding an
//	  x BETWEEN a AND {{fence}}; a OR {{fence}}                   INSERT), standing alone: it becomes TRUE, and
//	                                                              NOT TRUE would never write
//	INSERT … VALUES …, INSERT … SET …, (SELECT …) in parentheses refused: feed the INSERT with a plain SELECT
//	WITH q AS (DELETE | UPDATE | INSERT | MERGE …) …            refused: a write the fence does not guard
//	SELECT …, MERGE …, DDL, WHERE CURRENT OF                    refused: not a write fence can guard
//	stmt; stmt                                                  refused: one statement per call (on SQLite,
//	                                                              SQLite's own tokenizer decides)
//	1.0OR, 0x1F, 1_000, $1abc (a number glued to a word)        refused: servers and versions split it differently
//	control characters outside literals (other than tab, LF,    refused: the servers disagree on which are space
//	  CR LF), NUL, invalid UTF-8                                  and which end a -- comment
//	a backslash (MySQL: or backtick) right after a non-ASCII    refused on PostgreSQL and MySQL: in GBK, BIG5 or
//	  character                                                   SJIS, which a transaction can switch to, the
//	                                                              server reads the two as one character
//	a backslash before a quote whose reading depends on         refused: write 'it''s'
//	  NO_BACKSLASH_ESCAPES, ANSI_QUOTES or standard_conforming_strings
//	placeholders ≠ arguments; $1, $3 without $2; ? with $n      refused
//	SQLite ?NNN, :name, @name, $name; $n on SQLite or MySQL     refused: use ?
//	MySQL /*! … */ (run by the server as SQL)                   refused
//	CheckTx / CheckWith, then the transaction's writes          fenced until commit, if called at the top level
//	CheckTx inside a savepoint                                  PostgreSQL: refused with ErrInvalid (a rollback to
//	                                                              the savepoint would release the lock; pgx nested
//	                                                              transactions included). MariaDB/MySQL: NOT fenced
//	                                                              if the savepoint is rolled back, and fence cannot
//	                                                              see it: call CheckTx at the top level, or use
//	                                                              ExecIn with {{fence}} on each write. SQLite:
//	                                                              fenced (the transaction's write lock stays)
//
// Functions the statement calls are not fenced by fence's promise: fence
// guards the rows the statement writes, not a function's own side effects.
//
// Placeholders: write ? on every database. On PostgreSQL a statement with ?
// and no $n has its ? rebound to $1, $2, …; $n works too, but not both in one
// statement. Every ? outside literals and comments counts as a placeholder,
// so write jsonb's ?, ?| and ?& operators as jsonb_exists, jsonb_exists_any
// and jsonb_exists_all. fence adds its own arguments after or between the
// caller's. On PostgreSQL a SELECT feeding an INSERT that has a LIMIT of its
// own is wrapped in a subquery, where untyped parameters become text: cast
// them ($1::int).
package fence
