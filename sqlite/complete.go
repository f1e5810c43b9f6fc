package sqlite

import (
	"errors"
	"strings"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// errTwoStatements is CheckOneStatement's refusal; the root wraps it.
var errTwoStatements = errors.New("SQLite reads more than one statement in this SQL (a ; ends the first one before the end of the text); send each statement on its own")

// CheckOneStatement asks SQLite's own tokenizer (sqlite3_complete) whether
// q holds more than one statement. database/sql on this driver runs every
// statement of a text, so a second one would run without the fence, and
// fence's tokenizer is not the judge of where SQLite ends the first.
//
// A ";" ends a statement where sqlite3_complete(q[:i+1]) is true. Between
// two such ends, and after the last, SQLite must see nothing but blanks and
// comments: a text that is complete after "SELECT 1;" stays complete after
// blanks and comments and becomes incomplete at the first token of SQL
// (up to the next end, which is not part of the segment).
func (d *Driver) CheckOneStatement(q string) error {
	if strings.IndexByte(q, ';') < 0 {
		return nil // SQLite separates statements with ; only
	}
	tls := libc.NewTLS()
	defer tls.Close()
	var ends []int
	for i := 0; i < len(q); i++ {
		if q[i] != ';' {
			continue
		}
		ok, err := complete(tls, q[:i+1])
		if err != nil {
			return err
		}
		if ok {
			ends = append(ends, i)
		}
	}
	if len(ends) == 0 {
		return nil
	}
	prev := ends[0]
	for _, e := range append(ends[1:], len(q)) {
		// The newline ends a -- comment at the end of the text, which
		// sqlite3_complete would count as unfinished (SQLite's parser reads
		// it as a comment all the same).
		empty, err := complete(tls, "SELECT 1;"+q[prev+1:e]+"\n")
		if err != nil {
			return err
		}
		if !empty {
			return errTwoStatements
		}
		prev = e
	}
	return nil
}

// complete is sqlite3_complete(s): whether s ends with a ";" that ends a
// statement, as SQLite's tokenizer reads it.
func complete(tls *libc.TLS, s string) (bool, error) {
	p, err := libc.CString(s)
	if err != nil {
		return false, err
	}
	defer libc.Xfree(tls, p)
	return sqlite3.Xsqlite3_complete(tls, p) != 0, nil
}
