package fencetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencekit/fence"
)

// Columns named like the keywords that end a clause or a CASE (offset,
// limit, lock, end: the second review, 2026-12-05). fence once read them as
// the keywords, ended the WHERE early and let a later top-level OR go
// unchecked: a stale owner wrote every row. Each statement here, on each
// server, is either refused with ErrInvalid before anything is sent or
// fenced: the holder writes, a stale token changes nothing. The server is
// the judge of what the statement means.
func keywordColumnShapes(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	h := handleFor(s)
	tbl := s.Prefix() + "kw"
	q := map[fence.Dialect]func(string) string{
		fence.Postgres: func(n string) string { return `"` + n + `"` },
		fence.MySQL:    func(n string) string { return "`" + n + "`" },
		fence.SQLite:   func(n string) string { return `"` + n + `"` },
	}[s.Dialect()]
	cols := []string{"offset", "limit", "lock", "end", "returning", "order", "where", "conflict", "duplicate"}
	ddl := "CREATE TABLE " + tbl + " (id INT PRIMARY KEY, val VARCHAR(40) NOT NULL"
	for _, c := range cols {
		ddl += ", " + q(c) + " INT NOT NULL DEFAULT 1"
	}
	if _, err := h.exec(ctx, ddl+")"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.exec(context.Background(), "DROP TABLE IF EXISTS "+tbl) })
	reset := func(t *testing.T) {
		t.Helper()
		if _, err := h.exec(ctx, "DELETE FROM "+tbl); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			if _, err := h.exec(ctx, sqlf(s, "INSERT INTO "+tbl+" (id, val) VALUES (?, 'init')"), i); err != nil {
				t.Fatal(err)
			}
		}
	}
	var stmts []string
	for _, c := range cols {
		// Qualified: a name on every server, whatever it spells.
		stmts = append(stmts,
			"UPDATE {K} SET val = ? WHERE {K}."+c+" = 1 AND {{fence}} OR {K}.id > 0",
			"UPDATE {K} SET val = ? WHERE {K}.id = 1 AND {K}."+c+" = 1 AND {{fence}} OR {K}.id > 0",
			"DELETE FROM {K} WHERE {K}."+c+" = 1 AND {{fence}} OR {K}.id > 0",
			// Bare: the server refuses it where the word is reserved.
			"UPDATE {K} SET val = ? WHERE "+c+" = 1 AND {{fence}} OR id > 0",
			"UPDATE {K} SET val = ? WHERE id = 1 AND "+c+" = 1 AND {{fence}} OR id > 0",
			"UPDATE {K} SET val = ? WHERE CASE WHEN id = 1 THEN "+c+" ELSE 1 END = 1 AND {{fence}} OR id > 0",
			"UPDATE {K} SET val = ? WHERE id = 1 AND {{fence}} OR "+c+" = 1",
			"UPDATE {K} SET val = ? WHERE id = 1 AND {{fence}} OR {K}."+c+" = 1",
			// After the marker: the old checker ended the WHERE at the
			// word and never saw the OR that follows it.
			"UPDATE {K} SET val = ? WHERE {{fence}} AND {K}."+c+" = 1 OR {K}.id > 0",
			"UPDATE {K} SET val = ? WHERE {{fence}} AND "+c+" = 1 OR id > 0",
			"DELETE FROM {K} WHERE {{fence}} AND {K}."+c+" = 1 OR {K}.id > 0",
			"UPDATE {K} SET val = ? WHERE {{fence}} AND CASE WHEN "+c+" = 1 THEN 1 ELSE 0 END = 1 OR id > 0",
		)
	}
	var ran, refused, serverErr int
	for _, st := range stmts {
		text := strings.ReplaceAll(st, "{K}", tbl)
		args := []any{}
		if strings.Contains(text, "?") {
			args = append(args, "written")
		}
		text = sqlf(s, text)
		t.Run(text, func(t *testing.T) {
			reset(t)
			name := "kw"
			tok := mustAcquire(t, s, name, long)
			_, err := s.Exec(ctx, tok, text, args...)
			if errors.Is(err, fence.ErrInvalid) {
				refused++
				if _, err := s.Revoke(ctx, name); err != nil {
					t.Fatal(err)
				}
				if n, err := s.Exec(ctx, tok, text, args...); !errors.Is(err, fence.ErrInvalid) || n != 0 {
					t.Errorf("refused for the holder, but for a stale token: n=%d err=%v", n, err)
				}
				return
			}
			if err != nil && !errors.Is(err, fence.ErrNoMatch) {
				// The server's own refusal (a reserved word used bare):
				// nothing written.
				serverErr++
			} else {
				ran++
			}
			if _, err := s.Revoke(ctx, name); err != nil {
				t.Fatal(err)
			}
			reset(t)
			before := tablesSnapshot(t, s, tbl)
			n, err := s.Exec(ctx, tok, text, args...)
			if n != 0 || err == nil {
				t.Errorf("stale token: n=%d err=%v", n, err)
			}
			if after := tablesSnapshot(t, s, tbl); after != before {
				t.Errorf("stale token changed the table:\n before %s\n after  %s", before, after)
			}
		})
	}
	t.Logf("%d statements: %d ran for the holder, %d refused by fence, %d refused by the server", len(stmts), ran, refused, serverErr)
	if ran == 0 {
		t.Error("no statement ran for the holder: the case proves nothing")
	}
}
