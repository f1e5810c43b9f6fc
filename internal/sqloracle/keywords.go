package sqloracle

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/fencekit/fence"
)

// The keyword lists come from the servers themselves, at run time: a list
// written here would be fence's model of the server again, which is what
// the oracle is meant not to trust.
const (
	postgresKeywords = "SELECT word FROM pg_get_keywords()"
	// information_schema.KEYWORDS is in MariaDB 10.6+ and MySQL 8.0; MySQL
	// 8.0 adds a RESERVED column that MariaDB lacks, so only WORD is read.
	mysqlKeywords = "SELECT WORD FROM information_schema.KEYWORDS"
)

// word is what can be a column or alias name at all: MariaDB's list also
// holds operators (&&, <=>).
var word = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Keywords returns the keywords of the database behind db, as the server
// lists them: pg_get_keywords() on PostgreSQL, information_schema.KEYWORDS
// on MariaDB/MySQL, and on SQLite the list compiled into the linked library
// (sqlite3_keyword_count / sqlite3_keyword_name through modernc.org/sqlite/lib,
// so it is the tokenizer's own list, not the documentation's). Operators in
// the lists are left out; the words are sorted and unique (case-insensitive).
func Keywords(ctx context.Context, db *sql.DB, d fence.Dialect) ([]string, error) {
	var ws []string
	switch d {
	case fence.SQLite:
		ws = SQLiteKeywords()
	case fence.Postgres, fence.MySQL:
		q := postgresKeywords
		if d == fence.MySQL {
			q = mysqlKeywords
		}
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("sqloracle: reading the server's keyword list: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var w string
			if err := rows.Scan(&w); err != nil {
				return nil, err
			}
			ws = append(ws, w)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("sqloracle: no keyword list for dialect %q", d)
	}
	seen := map[string]bool{}
	var out []string
	for _, w := range ws {
		k := strings.ToUpper(w)
		if !word.MatchString(w) || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return strings.ToUpper(out[i]) < strings.ToUpper(out[j]) })
	if len(out) == 0 {
		return nil, fmt.Errorf("sqloracle: the %s keyword list is empty", d)
	}
	return out, nil
}

// SQLiteKeywords is the keyword list of the linked SQLite library.
func SQLiteKeywords() []string {
	tls := libc.NewTLS()
	defer tls.Close()
	n := sqlite3.Xsqlite3_keyword_count(tls)
	// The out parameters (const char **, int *) live in the library's
	// memory; they are read back as bytes, without converting its
	// addresses into Go pointers.
	const ptr = int(unsafe.Sizeof(uintptr(0)))
	buf := tls.Alloc(ptr + 4)
	defer tls.Free(ptr + 4)
	var out []string
	for i := int32(0); i < n; i++ {
		if sqlite3.Xsqlite3_keyword_name(tls, i, buf, buf+uintptr(ptr)) != sqlite3.SQLITE_OK {
			continue
		}
		var z uint64
		if ptr == 8 {
			z = binary.NativeEndian.Uint64(libc.GoBytes(buf, 8))
		} else {
			z = uint64(binary.NativeEndian.Uint32(libc.GoBytes(buf, 4)))
		}
		l := int32(binary.NativeEndian.Uint32(libc.GoBytes(buf+uintptr(ptr), 4)))
		out = append(out, string(libc.GoBytes(uintptr(z), int(l))))
	}
	return out
}

// SQLiteComplete is sqlite3_complete(s) of the linked library: whether s
// ends with a semicolon that ends a statement (not one inside a literal, a
// comment or a trigger body). Like the library, it sees s up to its first
// NUL byte.
func SQLiteComplete(s string) bool {
	tls := libc.NewTLS()
	defer tls.Close()
	return complete(tls, s)
}

func complete(tls *libc.TLS, s string) bool {
	p, err := libc.CString(s)
	if err != nil {
		panic(err)
	}
	defer libc.Xfree(tls, p)
	return sqlite3.Xsqlite3_complete(tls, p) != 0
}

// SQLiteStatements is how many statements SQLite's own tokenizer finds in s
// (sqlite3_complete and sqlite3_incomplete of the linked library), as the
// driver would run them one after another: a semicolon ends a statement
// when the text up to it is complete and the text before it was not (so
// an empty statement, ";;", is not counted), and the text after the last
// such semicolon is one more statement unless SQLite's state there is still
// "between statements" (space and comments only, even an unterminated --
// comment). Like the driver, which hands SQLite a C string, it stops at the
// first NUL byte.
func SQLiteStatements(s string) int {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	tls := libc.NewTLS()
	defer tls.Close()
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ';' && complete(tls, s[:i+1]) && !complete(tls, s[:i]) {
			n++
		}
	}
	// sqlite3_incomplete's second byte is non-zero while a statement still
	// needs its semicolon: there was a token after the last terminator.
	if needsSemicolon(tls, s) {
		n++
	}
	return n
}

func needsSemicolon(tls *libc.TLS, s string) bool {
	p, err := libc.CString(s)
	if err != nil {
		panic(err)
	}
	defer libc.Xfree(tls, p)
	return (sqlite3.Xsqlite3_incomplete(tls, p)>>8)&0xff != 0
}
