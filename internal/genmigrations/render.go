package main

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fencekit/fence/mysql"
	"github.com/fencekit/fence/postgres"
	"github.com/fencekit/fence/sqlite"
)

// source is one embedded migration with the prefix substituted.
type source struct {
	Version int
	Name    string // "init" for 0001_init.sql
	From    string // where it comes from, for the header: "sqlite/migrations/0001_init.sql"
	SQL     string
}

// dialect says how to render one database's migrations.
type dialect struct {
	Name string // directory name: sqlite, postgres, mysql
	// Now is the database clock in integer milliseconds, as the dialect's
	// driver writes it (NowSQL), for the applied_at_ms of the version rows.
	Now string
	// Schema creates fence's own version table exactly as Migrate does
	// (queries/schema_create.sql of the package; the tests compare the
	// resulting tables); Record inserts a version row, tolerating one that
	// is already there.
	Schema, Record string
	Load           func(prefix string) ([]source, error)
}

func dialects() ([]dialect, error) {
	sq, err := sqlite.New(nil, "x_")
	if err != nil {
		return nil, err
	}
	// postgres.New wants a handle; Open does not connect.
	pdb, err := postgres.Open("postgres://127.0.0.1/genmigrations")
	if err != nil {
		return nil, err
	}
	defer pdb.Close()
	pg, err := postgres.New(pdb, "x_")
	if err != nil {
		return nil, err
	}
	my, err := mysql.New(nil, "x_")
	if err != nil {
		return nil, err
	}
	return []dialect{
		{
			Name: "sqlite",
			Now:  sq.NowSQL(),
			Schema: `CREATE TABLE IF NOT EXISTS {{prefix}}schema (
    version       INTEGER NOT NULL PRIMARY KEY,
    applied_at_ms INTEGER NOT NULL
);`,
			Record: "INSERT INTO {{prefix}}schema (version, applied_at_ms) VALUES ({{version}}, {{now}})\nON CONFLICT (version) DO NOTHING;",
			Load:   func(p string) ([]source, error) { return loadFS(sqlite.Migrations, "sqlite", p) },
		},
		{
			Name: "postgres",
			Now:  pg.NowSQL(),
			Schema: `CREATE TABLE IF NOT EXISTS {{prefix}}schema (
    version       INT PRIMARY KEY,
    applied_at_ms BIGINT NOT NULL
);`,
			Record: "INSERT INTO {{prefix}}schema (version, applied_at_ms) VALUES ({{version}}, {{now}})\nON CONFLICT (version) DO NOTHING;",
			Load:   loadPostgres,
		},
		{
			Name: "mysql",
			Now:  my.NowSQL(),
			Schema: `CREATE TABLE IF NOT EXISTS {{prefix}}schema (
    version       INT    NOT NULL,
    applied_at_ms BIGINT NOT NULL,
    PRIMARY KEY (version)
) ENGINE = InnoDB;`,
			Record: "INSERT INTO {{prefix}}schema (version, applied_at_ms) VALUES ({{version}}, {{now}})\nON DUPLICATE KEY UPDATE version = version;",
			Load:   func(p string) ([]source, error) { return loadFS(mysql.Migrations, "mysql", p) },
		},
	}, nil
}

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// loadFS reads migrations/NNNN_name.sql of a package's embedded FS.
func loadFS(fsys fs.FS, pkg, prefix string) ([]source, error) {
	files, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var out []source
	for _, f := range files {
		m := fileName.FindStringSubmatch(path.Base(f))
		if m == nil {
			return nil, fmt.Errorf("%s/%s: not named NNNN_name.sql", pkg, f)
		}
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		v, _ := strconv.Atoi(m[1])
		out = append(out, source{Version: v, Name: m[2], From: pkg + "/" + f,
			SQL: strings.ReplaceAll(string(b), "{{prefix}}", prefix)})
	}
	return out, nil
}

func loadPostgres(prefix string) ([]source, error) {
	ms, err := postgres.RenderMigrations(prefix)
	if err != nil {
		return nil, err
	}
	out := make([]source, len(ms))
	for i, m := range ms {
		out[i] = source{Version: m.Version, Name: fileName.FindStringSubmatch(m.Name)[2],
			From: "postgres/migrations/" + m.Name, SQL: m.SQL}
	}
	return out, nil
}

// render returns every generated file, keyed by its path under migrations/.
func render(prefix string) (map[string][]byte, error) {
	ds, err := dialects()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, d := range ds {
		if err := d.render(prefix, files); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Name, err)
		}
	}
	return files, nil
}

// migration is one rendered migration before it is written in a tool's format.
type migration struct {
	src     source
	first   bool   // the first version: creates and finally drops <prefix>schema
	prelude string // the schema table, for the first version
	body    string // the source text
	spans   []span
	record  string   // the version row
	down    []string // statements, in order
}

func (d dialect) render(prefix string, files map[string][]byte) error {
	srcs, err := d.Load(prefix)
	if err != nil {
		return err
	}
	return d.renderSources(prefix, srcs, files)
}

// renderSources adds the files of srcs to files.
func (d dialect) renderSources(prefix string, srcs []source, files map[string][]byte) error {
	if len(srcs) == 0 {
		return fmt.Errorf("no embedded migrations")
	}
	sub := func(s string, v int) string {
		return strings.NewReplacer("{{prefix}}", prefix, "{{now}}", d.Now, "{{version}}", strconv.Itoa(v)).Replace(s)
	}
	for i, src := range srcs {
		if i > 0 && src.Version <= srcs[i-1].Version {
			return fmt.Errorf("%s repeats or reorders version %d", src.From, src.Version)
		}
		if j := strings.Index(src.SQL, "{{"); j >= 0 {
			return fmt.Errorf("%s: unknown macro at %q", src.From, src.SQL[j:min(len(src.SQL), j+30)])
		}
		m := migration{src: src, first: i == 0, body: strings.TrimSpace(src.SQL) + "\n", record: sub(d.Record, src.Version)}
		var err error
		if m.spans, err = splitSQL(m.body, d.Name); err != nil {
			return fmt.Errorf("%s: %w", src.From, err)
		}
		undo, err := undoStatements(m.body, m.spans)
		if err != nil {
			return fmt.Errorf("%s: %w", src.From, err)
		}
		if m.first {
			m.prelude = sub(d.Schema, src.Version)
		} else {
			m.down = append(m.down, fmt.Sprintf("DELETE FROM %sschema WHERE version = %d;", prefix, src.Version))
		}
		for _, u := range slices.Backward(undo) {
			m.down = append(m.down, u)
		}
		if m.first {
			m.down = append(m.down, "DROP TABLE IF EXISTS "+prefix+"schema;")
		}
		base := fmt.Sprintf("%04d_%s", src.Version, src.Name)
		g, err := m.goose(prefix)
		if err != nil {
			return fmt.Errorf("%s: %w", src.From, err)
		}
		files["goose/"+d.Name+"/"+base+".sql"] = []byte(g)
		up, down := m.golangMigrate(prefix)
		files["golang-migrate/"+d.Name+"/"+base+".up.sql"] = []byte(up)
		files["golang-migrate/"+d.Name+"/"+base+".down.sql"] = []byte(down)
	}
	return nil
}

var (
	createTable = regexp.MustCompile(`(?is)^CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z0-9_]+)`)
	// Objects that go away with their table, so Down need not drop them.
	dependent = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?(?:INDEX|TRIGGER)\s`)
	// ALTER TABLE t ADD COLUMN c …[, ADD COLUMN d …]: nothing else may follow
	// ALTER TABLE, so every clause must be an ADD COLUMN.
	alterTable = regexp.MustCompile(`(?is)^ALTER\s+TABLE\s+([A-Za-z0-9_]+)\s+(.*)$`)
	addColumn  = regexp.MustCompile(`(?is)^ADD\s+COLUMN\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z0-9_]+)\s`)
)

// downNote is a migration's own undo of the statement that follows it, on a
// comment line "-- down: STATEMENT" (without its semicolon: the MySQL driver
// splits its files at every semicolon). It is for what the generator cannot
// reverse by itself, such as a column whose type changed: only the file
// knows what the type was.
var downNote = regexp.MustCompile(`(?m)^--[ \t]*down:[ \t]*(\S.*?)[ \t]*;?[ \t]*$`)

// undoStatements returns, for each statement in order, the statements that
// undo it: the statement's down note if it has one, else DROP TABLE for
// CREATE TABLE and DROP COLUMN for ADD COLUMN. Down runs them backwards. A
// statement whose undo is none of those is refused rather than left behind
// by a Down.
func undoStatements(text string, spans []span) ([]string, error) {
	var out []string
	prev := 0
	for _, s := range spans {
		st := text[s.start:s.end]
		notes := downNote.FindAllStringSubmatch(text[prev:s.start], -1)
		prev = s.end
		if len(notes) > 1 {
			return nil, fmt.Errorf("%d down notes before %q: give one statement", len(notes), clip(st))
		}
		if len(notes) == 1 {
			out = append(out, notes[0][1]+";")
			continue
		}
		if m := createTable.FindStringSubmatch(st); m != nil {
			out = append(out, "DROP TABLE IF EXISTS "+m[1]+";")
			continue
		}
		if dependent.MatchString(st) {
			continue
		}
		if m := alterTable.FindStringSubmatch(strings.TrimSuffix(strings.TrimSpace(st), ";")); m != nil {
			cols, ok := addedColumns(m[2])
			if ok {
				for _, c := range cols {
					out = append(out, "ALTER TABLE "+m[1]+" DROP COLUMN "+c+";")
				}
				continue
			}
		}
		return nil, fmt.Errorf("cannot derive the Down migration of %q: genmigrations reverses only CREATE TABLE (with its indexes and triggers) and ALTER TABLE … ADD COLUMN; teach it this statement, or put a \"-- down: STATEMENT\" line before it", clip(st))
	}
	return out, nil
}

// addedColumns splits the clauses of an ALTER TABLE at top-level commas and
// returns the column each ADD COLUMN adds; ok is false if any clause is
// something else.
func addedColumns(clauses string) (cols []string, ok bool) {
	depth, start := 0, 0
	var parts []string
	for i, c := range clauses {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, clauses[start:i])
				start = i + 1
			}
		}
	}
	parts = append(parts, clauses[start:])
	for _, p := range parts {
		m := addColumn.FindStringSubmatch(strings.TrimSpace(p) + " ")
		if m == nil {
			return nil, false
		}
		cols = append(cols, m[1])
	}
	return cols, true
}

func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func (m migration) header(prefix, tool string) string {
	return fmt.Sprintf(`-- Code generated by go run ./internal/genmigrations; DO NOT EDIT.
-- fence schema version %d for %s, from %s,
-- with the table prefix %s. See migrations/README.md.
`, m.src.Version, tool, m.src.From, prefix)
}

const (
	preludeNote = `-- fence's own record of applied versions (Migrate's %sschema table).
`
	recordNote = `-- Record the version for fence too: Store.SchemaVersion then reports it, and
-- 'fence migrate' (Store.Migrate) finds nothing left to do.
`
)

// upText is the Up migration: the schema table (first version), the source
// and the version row. gooseBlocks wraps statements for goose where needed.
func (m migration) upText(prefix string, gooseBlocks bool) (string, error) {
	var b strings.Builder
	if m.first {
		fmt.Fprintf(&b, preludeNote, prefix)
		b.WriteString(m.prelude + "\n\n")
	}
	body := m.body
	if gooseBlocks {
		var err error
		if body, err = gooseBody(m.body, m.spans); err != nil {
			return "", err
		}
	}
	b.WriteString(body + "\n")
	b.WriteString(recordNote + m.record + "\n")
	return b.String(), nil
}

func (m migration) goose(prefix string) (string, error) {
	up, err := m.upText(prefix, true)
	if err != nil {
		return "", err
	}
	return m.header(prefix, "goose") + "\n-- +goose Up\n" + up + "\n-- +goose Down\n" + strings.Join(m.down, "\n") + "\n", nil
}

func (m migration) golangMigrate(prefix string) (up, down string) {
	u, _ := m.upText(prefix, false)
	return m.header(prefix, "golang-migrate (up)") + "\n" + u,
		m.header(prefix, "golang-migrate (down)") + "\n" + strings.Join(m.down, "\n") + "\n"
}
