// Package sqloracle is an oracle for fence's fenced writes that asks the
// servers (issue 27 §2): a fuzzer of the statements Store.Exec accepts,
// each run on the real database.
//
// The generator (Schema.Generate) writes statements of every shape fence
// accepts — UPDATE, DELETE, INSERT … SELECT, REPLACE … SELECT, upserts,
// RETURNING, ORDER BY/LIMIT and multi-table forms on MySQL, FROM/USING
// joins, read-only CTEs, subqueries, aggregates, GROUP BY, HAVING,
// DISTINCT, window functions, set operations in subqueries — spelled the
// hostile ways: every keyword of the server (taken from the server at run
// time: pg_get_keywords(), MariaDB's information_schema.KEYWORDS, SQLite's
// sqlite3_keyword_name) as a column and an alias name, bare, qualified and
// quoted; bytes 0x00-0x20 and 0x7F-0xFF as space and after -- and #;
// numbers glued to words (1.0OR, 1e1OR, 0x1OR); every comment and quoting
// form of the dialect (E'…', U&'…', $$, $tag$, nested /* */, #, /*! */,
// /*M! */, backslash escapes, "…", [..], `..`, x'…'); session variants
// (sql_mode ANSI_QUOTES, NO_BACKSLASH_ESCAPES, PIPES_AS_CONCAT, ORACLE, …;
// SET NAMES gbk/sjis/big5; standard_conforming_strings off;
// client_encoding GBK/SJIS/BIG5); and, in half the statements, a
// top-level OR, XOR or || or a second statement smuggled in one of those
// ways. It is random but seeded: a seed and a statement index reproduce a
// statement on the same server.
//
// The oracle (Oracle.Check): every statement the checker accepts (Exec
// returns anything but ErrInvalid) runs through ExecIn in a transaction
// that is rolled back, once as a stale owner (a token superseded by a
// takeover) — it must change and insert no row and must not report
// success — and once as the holder, to count the statements that really
// write. Rows written are seen by the server itself: on PostgreSQL and
// MariaDB by row triggers into a change log (and row counts), on SQLite by
// comparing every row. On SQLite the text fence sends is also counted
// with SQLite's own tokenizer (sqlite3_complete, sqlite3_incomplete): more
// than one statement is a failure. A failure is minimised by delta
// debugging over its hostile choices (Stmt.Minimise) and reported with its
// seed and index; failures are grouped by the hostile classes the
// minimised form still needs.
//
// Each statement runs on one of two handles over the same tables: the
// default one, and the most permissive configuration fence accepts
// (PostgreSQL's default_query_exec_mode=simple_protocol, which runs every
// statement of the text; MySQL's interpolateParams=true with
// multiStatements=true), so that a second statement hidden from fence
// would really run.
//
// Run it with go test (the tests open FENCE_TEST_POSTGRES,
// FENCE_TEST_MYSQL and SQLite in a temp dir):
//
//	FENCE_LONG=1 go test -run 'TestOracle$' ./internal/sqloracle
//
// runs CI's budget, 3000 statements per database; for an hour per
// database, with a seed of your choice and the per-database summary:
//
//	FENCE_LONG=1 FENCE_ORACLE_DURATION=1h FENCE_ORACLE_SEED=42 \
//	    go test -run 'TestOracle$' -timeout 0 -v ./internal/sqloracle
//
// FENCE_ORACLE_COUNT bounds the statements, FENCE_ORACLE_ONLY=i reruns
// statement i of the seed, FENCE_ORACLE_TRACE=server (or all) logs the
// statements the server refused (or every one). TestSQLiteBoundaries is
// the lexical boundary check against SQLite's tokenizer, TestCaught the
// catches that need the permissive handles; fencetest's OracleCatches keeps
// the others.
package sqloracle
