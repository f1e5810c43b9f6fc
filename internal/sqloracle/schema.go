package sqloracle

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fencekit/fence"
)

// Schema is what the generator writes statements against: two tables whose
// columns are, besides id, val and n, every keyword of the server, and
// what the server was found to accept of each keyword (probed once, so that
// most statements are valid SQL and the fuzzing budget is not spent on
// syntax errors; a small share still uses a spelling the probe refused).
type Schema struct {
	Dialect fence.Dialect
	// Items has rows 1-5; Sink has rows 1 and 2, so that an upsert or a
	// REPLACE from Items both updates and inserts. Both have the keyword
	// columns.
	Items, Sink string
	Cols        []Column
	// Options[h] lists, per session setting, the values that work on
	// handle h; the first is the connection's own.
	Options []map[string][]string
}

// Column is a keyword-named column of both tables, with the spellings the
// server accepted for it.
type Column struct {
	Name string // as created: PostgreSQL folds unquoted names to lower case
	// Bare: `SELECT kw FROM items`; Qualified: `SELECT t.kw FROM items AS t`;
	// SetBare: `UPDATE items SET kw = 1`; Alias: `SELECT kw.id FROM items AS kw`.
	Bare, Qualified, SetBare, Alias bool
}

// Session is the connection and the session settings a statement runs
// with: which handle (0 the default one; 1 the most permissive one fence
// accepts: PostgreSQL's simple protocol, MySQL's interpolateParams with
// multiStatements), and settings such as sql_mode.
type Session struct {
	Handle   int
	Settings []Setting
}

// Setting is one session setting.
type Setting struct{ Name, Value string }

func (s Session) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "handle %d", s.Handle)
	for _, x := range s.Settings {
		fmt.Fprintf(&b, ", %s=%s", x.Name, x.Value)
	}
	return b.String()
}

// setSQL is the statement that applies setting x on dialect d.
func setSQL(d fence.Dialect, x Setting) string {
	switch {
	case d == fence.MySQL && x.Name == "names":
		return "SET NAMES " + x.Value
	case d == fence.MySQL:
		return "SET SESSION " + x.Name + " = '" + x.Value + "'"
	default:
		return "SET " + x.Name + " = '" + x.Value + "'"
	}
}

// settingNames lists the session settings the oracle varies, per dialect,
// and the values it tries besides the connection's own.
func settingValues(d fence.Dialect) map[string][]string {
	switch d {
	case fence.MySQL:
		return map[string][]string{
			// Each changes how the server reads quotes, backslashes, ||,
			// NOT or a name before "(": the lexer and parser rules the
			// checker must agree with.
			"sql_mode": {"", "ANSI_QUOTES", "NO_BACKSLASH_ESCAPES", "ANSI_QUOTES,NO_BACKSLASH_ESCAPES",
				"PIPES_AS_CONCAT", "ANSI", "HIGH_NOT_PRECEDENCE", "IGNORE_SPACE", "ORACLE", "MSSQL", "POSTGRESQL"},
			// Character sets in which a backslash can be the second byte of
			// a character; a DSN may name them (charset=gbk).
			"names": {"gbk", "big5", "sjis", "cp932", "gb2312", "latin1"},
		}
	case fence.Postgres:
		return map[string][]string{
			"standard_conforming_strings": {"off"},
			// Client encodings in which a backslash can be a second byte.
			"client_encoding": {"SJIS", "BIG5", "GBK", "LATIN1"},
		}
	}
	return nil
}

func sortedKeys(m map[string][]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// quoteIdent quotes name the dialect's standard way (backticks on MySQL,
// double quotes elsewhere).
func quoteIdent(d fence.Dialect, name string) string {
	if d == fence.MySQL {
		return "`" + strings.ReplaceAll(name, "`", "``") + "`"
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
