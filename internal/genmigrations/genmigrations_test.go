package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pressly/goose/v3"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/sqlite"
)

// committed is the migrations directory, from this package's directory.
const committed = "../../migrations"

// TestCommittedFilesAreCurrent regenerates the files into a temp dir and
// compares them byte for byte with the committed ones.
func TestCommittedFilesAreCurrent(t *testing.T) {
	files, err := render(fence.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := write(tmp, files); err != nil {
		t.Fatal(err)
	}
	want, err := listSQL(tmp)
	if err != nil {
		t.Fatal(err)
	}
	have, err := listSQL(committed)
	if err != nil {
		t.Fatal(err)
	}
	const fix = "; run go generate ./migrations"
	for _, p := range want {
		if !slices.Contains(have, p) {
			t.Errorf("migrations/%s is missing%s", p, fix)
		}
	}
	for _, p := range have {
		if !slices.Contains(want, p) {
			t.Errorf("migrations/%s is not generated any more%s", p, fix)
		}
	}
	for _, p := range want {
		got, err := os.ReadFile(filepath.Join(committed, p))
		if err != nil {
			continue // reported above
		}
		exp, _ := os.ReadFile(filepath.Join(tmp, p))
		if !bytes.Equal(got, exp) {
			t.Errorf("migrations/%s is stale (first difference at line %d)%s", p, firstDiff(got, exp), fix)
		}
	}
}

func firstDiff(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

func TestWriteRemovesStaleFiles(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "goose", "sqlite", "0009_gone.sql")
	if err := os.MkdirAll(filepath.Dir(old), 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(dir, "README.md")
	for _, f := range []string{old, keep} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := write(dir, map[string][]byte{"goose/sqlite/0001_a.sql": []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("stale %s was not removed (%v)", old, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("README.md, which genmigrations does not own, was touched: %v", err)
	}
}

func TestRenderPrefix(t *testing.T) {
	files, err := render("app_")
	if err != nil {
		t.Fatal(err)
	}
	// SQLite has four versions; PostgreSQL five (4: the lease_until
	// function) and MySQL five (4: its state column became CHAR(8)), each
	// with 6, the effect ledger; each has a goose file, an up and a down.
	if len(files) != 42 {
		t.Errorf("%d files, want 42 (4 + 5 + 5 versions × goose + up + down)", len(files))
	}
	for p, b := range files {
		s := string(b)
		for _, table := range []string{"leases", "runs", "schema", "tasks", "task_steps", "task_effects"} {
			if strings.Contains(s, "fence_"+table+" ") || strings.Contains(s, "fence_"+table+";") {
				t.Errorf("%s still names fence_%s", p, table)
			}
		}
		if !strings.Contains(s, "app_") {
			t.Errorf("%s does not use the prefix app_", p)
		}
	}
	if _, err := render("bad-prefix"); err == nil {
		t.Error("render accepted an invalid prefix")
	}
}

func TestSplitSQL(t *testing.T) {
	for _, tc := range []struct {
		name, dialect, sql string
		want               []string
	}{
		{"plain", "sqlite", "CREATE TABLE a (x INT);\n\nCREATE INDEX i ON a (x);\n",
			[]string{"CREATE TABLE a (x INT);", "CREATE INDEX i ON a (x);"}},
		{"comments", "sqlite", "-- one; two\nCREATE TABLE a ( -- c;\n x INT /* ; */);\n-- trailing;\n",
			[]string{"CREATE TABLE a ( -- c;\n x INT /* ; */);"}},
		{"strings", "mysql", "INSERT INTO a VALUES ('x;''y', \"z;\", 'a\\';b');\n",
			[]string{"INSERT INTO a VALUES ('x;''y', \"z;\", 'a\\';b');"}},
		{"backticks", "mysql", "CREATE TABLE `a;b` (x INT);\n", []string{"CREATE TABLE `a;b` (x INT);"}},
		{"dollar", "postgres", "CREATE FUNCTION f() RETURNS int AS $body$ BEGIN RETURN 1; END $body$ LANGUAGE plpgsql;\nSELECT $1;\n",
			[]string{"CREATE FUNCTION f() RETURNS int AS $body$ BEGIN RETURN 1; END $body$ LANGUAGE plpgsql;", "SELECT $1;"}},
		{"trigger", "sqlite", "CREATE TRIGGER t AFTER INSERT ON a BEGIN\n  UPDATE a SET x = CASE WHEN x > 0 THEN 1 ELSE 0 END;\n  DELETE FROM b;\nEND;\nSELECT 1;\n",
			[]string{"CREATE TRIGGER t AFTER INSERT ON a BEGIN\n  UPDATE a SET x = CASE WHEN x > 0 THEN 1 ELSE 0 END;\n  DELETE FROM b;\nEND;", "SELECT 1;"}},
		{"end if", "mysql", "CREATE PROCEDURE p() BEGIN IF 1 THEN SELECT 1; END IF; END;\n",
			[]string{"CREATE PROCEDURE p() BEGIN IF 1 THEN SELECT 1; END IF; END;"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans, err := splitSQL(tc.sql, tc.dialect)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range spans {
				got = append(got, tc.sql[s.start:s.end])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"CREATE TABLE a (x INT)", "SELECT 'x;", "CREATE TRIGGER t BEGIN SELECT 1;", "/* open"} {
		if _, err := splitSQL(bad, "sqlite"); err == nil {
			t.Errorf("splitSQL(%q) succeeded", bad)
		}
	}
}

func TestGooseBody(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"simple statements stay as they are",
			"-- c\nCREATE TABLE a (\n  x INT -- why;\n);\nCREATE INDEX i ON a (x); -- done\n",
			"-- c\nCREATE TABLE a (\n  x INT -- why;\n);\nCREATE INDEX i ON a (x); -- done\n"},
		{"a semicolon at a line end inside a statement gets a block",
			"-- trigger\nCREATE TRIGGER t AFTER INSERT ON a BEGIN\n  DELETE FROM b;\nEND;\nSELECT 1;\n",
			"-- trigger\n-- +goose StatementBegin\nCREATE TRIGGER t AFTER INSERT ON a BEGIN\n  DELETE FROM b;\nEND;\n-- +goose StatementEnd\nSELECT 1;\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans, err := splitSQL(tc.in, "sqlite")
			if err != nil {
				t.Fatal(err)
			}
			got, err := gooseBody(tc.in, spans)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"SELECT 1; SELECT 2;\n", "SELECT 1; SELECT\n2;\n", "-- +goose Up\nSELECT 1;\n"} {
		spans, err := splitSQL(bad, "sqlite")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gooseBody(bad, spans); err == nil {
			t.Errorf("gooseBody(%q) succeeded", bad)
		}
	}
}

func TestDownIsDerivedOnlyFromCreateTableAndAddColumn(t *testing.T) {
	d := sqliteDialect(t)
	files := map[string][]byte{}
	err := d.renderSources("fence_", []source{{Version: 1, Name: "x", From: "test",
		SQL: "CREATE TABLE fence_a (x INT);\nALTER TABLE fence_a ADD COLUMN y INT DEFAULT (1), ADD COLUMN IF NOT EXISTS z INT;\n"}}, files)
	if err != nil {
		t.Fatal(err)
	}
	down := string(files["golang-migrate/sqlite/0001_x.down.sql"])
	want := "ALTER TABLE fence_a DROP COLUMN z;\nALTER TABLE fence_a DROP COLUMN y;\nDROP TABLE IF EXISTS fence_a;\n"
	if !strings.Contains(down, want) {
		t.Errorf("down:\n%s\nwant it to contain\n%s", down, want)
	}
	for _, bad := range []string{
		"ALTER TABLE fence_a DROP COLUMN y;\n",
		"ALTER TABLE fence_a ADD COLUMN y INT, DROP COLUMN x;\n",
		"ALTER TABLE fence_a RENAME TO fence_b;\n",
		"UPDATE fence_a SET x = 1;\n",
	} {
		err := d.renderSources("fence_", []source{{Version: 1, Name: "x", From: "test", SQL: "CREATE TABLE fence_a (x INT);\n" + bad}}, map[string][]byte{})
		if err == nil || !strings.Contains(err.Error(), "cannot derive the Down") {
			t.Errorf("%q was accepted, err = %v", bad, err)
		}
	}
}

// A statement the generator cannot reverse by itself is reversed by the
// "-- down:" line before it, in its place in the Down; two such lines before
// one statement are refused.
func TestDownNote(t *testing.T) {
	d := sqliteDialect(t)
	files := map[string][]byte{}
	err := d.renderSources("fence_", []source{{Version: 1, Name: "x", From: "test",
		SQL: "CREATE TABLE fence_a (x VARCHAR(16));\n-- Why the type changes.\n-- down: ALTER TABLE fence_a MODIFY x VARCHAR(16) NOT NULL\n" +
			"ALTER TABLE fence_a MODIFY x CHAR(8) NOT NULL;\nALTER TABLE fence_a ADD COLUMN y INT;\n"}}, files)
	if err != nil {
		t.Fatal(err)
	}
	down := string(files["golang-migrate/sqlite/0001_x.down.sql"])
	want := "ALTER TABLE fence_a DROP COLUMN y;\nALTER TABLE fence_a MODIFY x VARCHAR(16) NOT NULL;\nDROP TABLE IF EXISTS fence_a;\n"
	if !strings.Contains(down, want) {
		t.Errorf("down:\n%s\nwant it to contain\n%s", down, want)
	}
	err = d.renderSources("fence_", []source{{Version: 1, Name: "x", From: "test",
		SQL: "CREATE TABLE fence_a (x INT);\n-- down: SELECT 1\n-- down: SELECT 2\nALTER TABLE fence_a RENAME TO fence_b;\n"}}, map[string][]byte{})
	if err == nil || !strings.Contains(err.Error(), "2 down notes") {
		t.Errorf("two down notes: err = %v", err)
	}
}

func sqliteDialect(t *testing.T) dialect {
	t.Helper()
	ds, err := dialects()
	if err != nil {
		t.Fatal(err)
	}
	return ds[0]
}

// TestGooseRunsCompoundStatements renders a migration with a trigger (whose
// body has semicolons at line ends) and runs it with goose on SQLite, up and
// down: without the StatementBegin/End block goose would split the trigger.
func TestGooseRunsCompoundStatements(t *testing.T) {
	d := sqliteDialect(t)
	files := map[string][]byte{}
	err := d.renderSources("fence_", []source{{Version: 1, Name: "trigger", From: "test", SQL: `
CREATE TABLE fence_a (x INTEGER);
CREATE TABLE fence_b (n INTEGER);
CREATE TRIGGER fence_a_count AFTER INSERT ON fence_a BEGIN
    INSERT INTO fence_b (n) VALUES (new.x);
    UPDATE fence_b SET n = n + 1;
END;
`}}, files)
	if err != nil {
		t.Fatal(err)
	}
	g := files["goose/sqlite/0001_trigger.sql"]
	if !bytes.Contains(g, []byte("-- +goose StatementBegin\nCREATE TRIGGER")) {
		t.Fatalf("the trigger is not in a StatementBegin block:\n%s", g)
	}
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fstest.MapFS{"0001_trigger.sql": {Data: g}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("goose up: %v\n%s", err, g)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO fence_a (x) VALUES (41)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT n FROM fence_b").Scan(&n); err != nil || n != 42 {
		t.Fatalf("trigger result %d, %v; want 42", n, err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("goose down: %v", err)
	}
	var left int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'fence%'").Scan(&left); err != nil || left != 0 {
		t.Errorf("%d fence objects left after down (%v)", left, err)
	}
}

// TestSedReprefix checks the README's sed command: applied to the fence_
// files it gives the statements that rendering with another prefix gives
// (comments aside, which mention the default prefix).
func TestSedReprefix(t *testing.T) {
	sed, err := exec.LookPath("sed")
	if err != nil {
		t.Skip("no sed")
	}
	readme, err := os.ReadFile(filepath.Join(committed, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const expr = `s/\bfence_(leases|runs|schema|tasks|task_steps|task_effects|lease_until)/myapp_\1/g`
	if !bytes.Contains(readme, []byte("sed -i -E '"+expr+"'")) {
		t.Fatalf("README.md no longer shows the sed command %q; update this test", expr)
	}
	def, err := render("fence_")
	if err != nil {
		t.Fatal(err)
	}
	other, err := render("myapp_")
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range def {
		cmd := exec.Command(sed, "-E", expr)
		cmd.Stdin = bytes.NewReader(b)
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("sed: %v", err)
		}
		if g, w := statements(string(got)), statements(string(other[p])); g != w {
			t.Errorf("%s: sed gives\n%s\nwant\n%s", p, g, w)
		}
	}
}

// statements drops comment lines, which name the default prefix.
func statements(s string) string {
	var b strings.Builder
	for l := range strings.Lines(s) {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") || strings.Contains(l, "+goose") {
			b.WriteString(l)
		}
	}
	return b.String()
}
