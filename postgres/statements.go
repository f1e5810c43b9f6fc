package postgres

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Migrations holds the schema migrations as migrations/NNNN_name.sql, applied
// in order by Migrate. Each file contains {{prefix}} where the table prefix
// goes; RenderMigrations substitutes it for use with another migration tool.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// queries/ holds one statement per file; fragments/ holds SQL spliced into
// them: now_ms.sql, the database clock in milliseconds; guard.sql, the
// fence predicate, whose {{name}}, {{owner}} and {{fence}} become numbered
// placeholders (a query that says {{guard}} binds the token as $1, $2, $3);
// floor_us.sql, the database clock in microseconds, below which no new fence
// goes (docs/adr/0004-fence-floor.md); and notify.sql, the release notification of lease l (handoff.go).
//
//go:embed queries/*.sql fragments/*.sql
var sqlFiles embed.FS

// Migration is one schema migration with the prefix substituted.
type Migration struct {
	Version int    // from the file name's leading digits
	Name    string // file name, e.g. "0001_init.sql"
	SQL     string
}

// RenderMigrations returns the migrations in version order with prefix
// substituted, for a caller who applies them with their own tool. Migrate
// also records each applied version in prefix+"schema"; another tool keeps
// its own record instead.
func RenderMigrations(prefix string) ([]Migration, error) {
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("postgres: table prefix %q must match %s", clip(prefix), prefixRE)
	}
	return renderMigrations(prefix)
}

var migrationName = regexp.MustCompile(`^(\d{4})_[a-z0-9_]+\.sql$`)

func renderMigrations(prefix string) ([]Migration, error) {
	files, err := fs.Glob(Migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	// fs.Glob returns names sorted, and the four-digit prefix makes that
	// version order.
	nowMs, err := fragment("now_ms")
	if err != nil {
		return nil, err
	}
	out := make([]Migration, 0, len(files))
	for _, f := range files {
		name := path.Base(f)
		m := migrationName.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("postgres: migration file %q is not named NNNN_name.sql", name)
		}
		v, _ := strconv.Atoi(m[1])
		if len(out) > 0 && v <= out[len(out)-1].Version {
			return nil, fmt.Errorf("postgres: migration %q repeats version %d", name, v)
		}
		b, err := Migrations.ReadFile(f)
		if err != nil {
			return nil, err
		}
		text, err := expand(string(b), prefix, nowMs)
		if err != nil {
			return nil, fmt.Errorf("postgres: migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: text})
	}
	return out, nil
}

// statements is every statement of the driver, rendered for one prefix.
type statements struct {
	acquire, renew, renewBatch, release, isHeld, get, list, revoke, raise, now, lockTx, lockTxTop string

	// The fallbacks of the plain single-row statements above: an acquire of
	// a name with no row, and a renew or release that waited for the row
	// past the instant it judged the lease at.
	acquireNew, renewLocked, releaseLocked string

	// acquireUpdate is the plain UPDATE that takes a lease known to exist
	// and not known held (driver.Hints); lease_acquire.sql answers the rest.
	acquireUpdate string

	runStart, runFinish, runMarkLost, runRefused, runSweep, runPrune, runGet, runList string

	schemaLock, schemaCreate, schemaVersion, schemaRecord, dropTables string

	nowMs         string // the database clock in milliseconds, as SQL
	guardTemplate string // guard.sql rendered except for its placeholders
	// guards[i] is the guard numbered from $i+1: rendered once, not on
	// every fenced write (a strings.Replacer per call was 1.6 µs and 19
	// allocations).
	guards     [32]string
	migrations []Migration
}

func loadStatements(prefix string) (*statements, error) {
	nowMs, err := fragment("now_ms")
	if err != nil {
		return nil, err
	}
	guard, err := fragment("guard")
	if err != nil {
		return nil, err
	}
	guard = strings.NewReplacer("{{now_ms}}", nowMs, "{{prefix}}", prefix).Replace(guard)
	notify, err := fragment("notify")
	if err != nil {
		return nil, err
	}
	floorUs, err := fragment("floor_us")
	if err != nil {
		return nil, err
	}
	// The same clocks at the statement's start (statement_timestamp(), one
	// instant for the whole statement, fresh in any transaction), for a
	// statement that needs one instant without a materialised CTE.
	stmtNowMs, err := fragment("stmt_now_ms")
	if err != nil {
		return nil, err
	}
	stmtFloorUs, err := fragment("stmt_floor_us")
	if err != nil {
		return nil, err
	}
	s := &statements{guardTemplate: guard, nowMs: nowMs}
	for i := range s.guards {
		s.guards[i] = s.renderGuard(i + 1)
	}
	for _, f := range []struct {
		file string
		dst  *string
	}{
		{"lease_acquire", &s.acquire},
		{"lease_acquire_new", &s.acquireNew},
		{"lease_acquire_update", &s.acquireUpdate},
		{"lease_renew", &s.renew},
		{"lease_renew_locked", &s.renewLocked},
		{"lease_renew_batch", &s.renewBatch},
		{"lease_release", &s.release},
		{"lease_release_locked", &s.releaseLocked},
		{"lease_is_held", &s.isHeld},
		{"lease_get", &s.get},
		{"lease_list", &s.list},
		{"lease_revoke", &s.revoke},
		{"lease_raise", &s.raise},
		{"now", &s.now},
		{"lock_tx", &s.lockTx},
		{"lock_tx_top", &s.lockTxTop},
		{"run_start", &s.runStart},
		{"run_finish", &s.runFinish},
		{"run_mark_lost", &s.runMarkLost},
		{"run_refused", &s.runRefused},
		{"run_sweep", &s.runSweep},
		{"run_prune", &s.runPrune},
		{"run_get", &s.runGet},
		{"run_list", &s.runList},
		{"schema_lock", &s.schemaLock},
		{"schema_create", &s.schemaCreate},
		{"schema_version", &s.schemaVersion},
		{"schema_record", &s.schemaRecord},
		{"drop_tables", &s.dropTables},
	} {
		b, err := sqlFiles.ReadFile("queries/" + f.file + ".sql")
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		text := strings.NewReplacer("{{guard}}", s.guard(1), "{{notify}}", notify, "{{floor_us}}", floorUs,
			"{{stmt_now_ms}}", stmtNowMs, "{{stmt_floor_us}}", stmtFloorUs).Replace(string(b))
		if *f.dst, err = expand(stripComments(text), prefix, nowMs); err != nil {
			return nil, fmt.Errorf("postgres: queries/%s.sql: %w", f.file, err)
		}
	}
	if s.migrations, err = renderMigrations(prefix); err != nil {
		return nil, err
	}
	return s, nil
}

// guard returns the fence predicate with its placeholders numbered from
// first. The casts give the placeholders their types whatever the caller's
// statement around them.
func (s *statements) guard(first int) string {
	if first >= 1 && first <= len(s.guards) {
		return s.guards[first-1]
	}
	return s.renderGuard(first)
}

func (s *statements) renderGuard(first int) string {
	ph := func(i int, typ string) string { return "$" + strconv.Itoa(first+i) + "::" + typ }
	return strings.NewReplacer(
		"{{name}}", ph(0, "text"),
		"{{owner}}", ph(1, "text"),
		"{{fence}}", ph(2, "bigint"),
	).Replace(s.guardTemplate)
}

// fragment reads fragments/name.sql as one line.
func fragment(name string) (string, error) {
	b, err := sqlFiles.ReadFile("fragments/" + name + ".sql")
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	return strings.Join(strings.Fields(string(b)), " "), nil
}

// expand substitutes the prefix and the clock, and refuses any other {{…}}
// left over, so that a misspelt macro fails New instead of reaching the server.
func expand(text, prefix, nowMs string) (string, error) {
	text = strings.NewReplacer("{{prefix}}", prefix, "{{now_ms}}", nowMs).Replace(text)
	if i := strings.Index(text, "{{"); i >= 0 {
		end := min(len(text), i+30)
		return "", fmt.Errorf("unknown macro at %q", text[i:end])
	}
	return strings.TrimSpace(text), nil
}

// stripComments drops whole-line "--" comments: they explain the statement
// to readers of the file, not to the server.
func stripComments(text string) string {
	lines := strings.Split(text, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}
