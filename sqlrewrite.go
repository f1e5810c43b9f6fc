package fence

import (
	"fmt"
	"strconv"
	"strings"
)

// Markers that fenced-write helpers replace in the caller's SQL.
const (
	// FenceMarker stands where the fence predicate goes in a statement given
	// to Exec: "UPDATE items SET v = ? WHERE id = ? AND {{fence}}".
	FenceMarker = "{{fence}}"
	// TokenMarker stands for the caller's fence number as a bound parameter in
	// a statement given to ExecResource.
	TokenMarker = "{{fence_token}}"
	// NowMarker stands for the database clock in integer milliseconds in a
	// statement given to Exec or Fenced.
	NowMarker = "{{now_ms}}"
)

// lexer walks SQL text, skipping string literals, quoted identifiers and
// comments, so markers and placeholders are only found in the SQL itself.
type lexer struct {
	q       string
	dialect Dialect
}

// scan calls visit for every byte offset outside literals and comments. visit
// returns how many bytes it consumed (0 to let the lexer move on).
func (l lexer) scan(visit func(i int) int) error {
	q := l.q
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\'' || c == '"' || (c == '`' && l.dialect == MySQL):
			j, err := l.skipQuoted(i, c)
			if err != nil {
				return err
			}
			i = j
		case c == '-' && strings.HasPrefix(q[i:], "--"):
			if j := strings.IndexByte(q[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(q)
			}
		case c == '#' && l.dialect == MySQL:
			if j := strings.IndexByte(q[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(q)
			}
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			j := strings.Index(q[i+2:], "*/")
			if j < 0 {
				return fmt.Errorf("%w: unterminated /* comment in SQL", ErrInvalid)
			}
			i += j + 4
		case c == '$' && l.dialect == Postgres && i+1 < len(q) && !isDigit(q[i+1]):
			// Dollar quoting: $$…$$ or $tag$…$tag$.
			k := i + 1
			for k < len(q) && (isIdent(q[k])) {
				k++
			}
			if k < len(q) && q[k] == '$' {
				tag := q[i : k+1]
				j := strings.Index(q[k+1:], tag)
				if j < 0 {
					return fmt.Errorf("%w: unterminated dollar-quoted string %s in SQL", ErrInvalid, tag)
				}
				i = k + 1 + j + len(tag)
				continue
			}
			i++
		default:
			if n := visit(i); n > 0 {
				i += n
			} else {
				i++
			}
		}
	}
	return nil
}

func (l lexer) skipQuoted(i int, quote byte) (int, error) {
	q := l.q
	for j := i + 1; j < len(q); j++ {
		switch {
		case q[j] == '\\' && l.dialect == MySQL && quote != '`':
			j++ // MySQL strings take backslash escapes by default
		case q[j] == quote:
			if j+1 < len(q) && q[j+1] == quote {
				j++ // doubled quote
				continue
			}
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%w: unterminated %c quote in SQL", ErrInvalid, quote)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || c >= 0x80
}

// splice replaces each marker in query with what repl returns for it, keeping
// the caller's own placeholders and arguments in order. repl receives the
// number of the first placeholder it may use ($N dialects) and returns SQL
// and the arguments of its placeholders. want is how many markers must occur:
// -1 for at least one, 0 for any number.
func splice(d Dialect, query string, args []any, marker string, want int, repl func(first int) (string, []any)) (string, []any, error) {
	dollar := d == Postgres
	type hit struct{ at, argPos int }
	var hits []hit
	maxN, qmarks := 0, 0
	err := lexer{q: query, dialect: d}.scan(func(i int) int {
		switch {
		case strings.HasPrefix(query[i:], marker):
			hits = append(hits, hit{at: i, argPos: qmarks})
			return len(marker)
		case dollar && query[i] == '$':
			k := i + 1
			for k < len(query) && isDigit(query[k]) {
				k++
			}
			if n, err := strconv.Atoi(query[i+1 : k]); err == nil && n > maxN {
				maxN = n
			}
			return k - i
		case !dollar && query[i] == '?':
			if i+1 < len(query) && (isDigit(query[i+1])) {
				qmarks = -1 << 30 // numbered ?NNN: positions unknowable
			}
			qmarks++
		}
		return 0
	})
	if err != nil {
		return "", nil, err
	}
	if want != 0 && (len(hits) == 0 || (want > 0 && len(hits) != want)) {
		return "", nil, fmt.Errorf("%w: SQL must contain %s exactly %s", ErrInvalid, marker, map[bool]string{true: "once", false: "at least once"}[want == 1])
	}
	if !dollar && qmarks < 0 {
		return "", nil, fmt.Errorf("%w: numbered ?NNN placeholders cannot be combined with %s; use plain ?", ErrInvalid, marker)
	}
	if dollar && maxN != len(args) {
		return "", nil, fmt.Errorf("%w: SQL uses placeholders up to $%d but %d arguments were given", ErrInvalid, maxN, len(args))
	}
	if !dollar && qmarks != len(args) {
		return "", nil, fmt.Errorf("%w: SQL has %d ? placeholders but %d arguments were given", ErrInvalid, qmarks, len(args))
	}
	var b strings.Builder
	last := 0
	if dollar {
		// Numbered placeholders: the marker's arguments go after the caller's.
		out := append([]any{}, args...)
		next := maxN + 1
		for _, h := range hits {
			b.WriteString(query[last:h.at])
			sql, extra := repl(next)
			b.WriteString(sql)
			next += len(extra)
			out = append(out, extra...)
			last = h.at + len(marker)
		}
		b.WriteString(query[last:])
		return b.String(), out, nil
	}
	// Positional placeholders: the marker's arguments go where it stands.
	var out []any
	argAt := 0
	for _, h := range hits {
		b.WriteString(query[last:h.at])
		sql, extra := repl(0)
		b.WriteString(sql)
		out = append(out, args[argAt:h.argPos]...)
		out = append(out, extra...)
		argAt = h.argPos
		last = h.at + len(marker)
	}
	b.WriteString(query[last:])
	out = append(out, args[argAt:]...)
	return b.String(), out, nil
}
