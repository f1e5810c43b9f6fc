package fence

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
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

// The rewrite works on tokens, not on a parse tree: fence does not parse
// SQL, it finds out enough to refuse every shape in which {{fence}} would not
// guard every row the statement writes. So the tokenizer must agree with the
// server on where literals, quoted names and comments begin and end (a
// disagreement could hide an OR from the checks), and the shape rules below
// accept only what they can prove, refusing the rest with ErrInvalid.

type tokKind uint8

const (
	tWord   tokKind = iota // keyword or unquoted name
	tQuoted                // quoted name
	tString                // string literal of any kind
	tNumber
	tParam  // ?, or $n on PostgreSQL
	tMarker // {{fence}}, {{fence_token}} or {{now_ms}}
	tPunct  // ( ) , ;
	tOp     // any other character
)

type token struct {
	kind     tokKind
	pos, end int    // byte offsets in the query
	word     string // tWord: upper-cased text; tParam: "?" or "$"; tMarker: the marker
	n        int    // tParam "$": its number
}

// tokenize splits q into tokens for dialect d, skipping comments and
// whitespace. It refuses what it cannot delimit as the server would:
// unterminated literals and comments, MySQL's executable comments, and
// placeholder forms whose argument positions fence cannot know. It also
// refuses a statement whose tokens depend on a server setting: a backslash
// before a quote ends a literal or not depending on MySQL's sql_mode
// (NO_BACKSLASH_ESCAPES, ANSI_QUOTES) or PostgreSQL's
// standard_conforming_strings, and either reading might hide an OR.
func tokenize(d Dialect, q string) ([]token, error) {
	toks, err := tokenizeMode(d, q, false)
	if err != nil || d == SQLite {
		return toks, err
	}
	alt, err := tokenizeMode(d, q, true)
	same := err == nil && len(alt) == len(toks)
	for i := 0; same && i < len(toks); i++ {
		same = alt[i].pos == toks[i].pos && alt[i].end == toks[i].end
	}
	if !same {
		return nil, fmt.Errorf("%w: a backslash before a quote makes this SQL read differently depending on the server's settings (MySQL NO_BACKSLASH_ESCAPES or ANSI_QUOTES, PostgreSQL standard_conforming_strings); write a quote inside a literal by doubling it ('it''s'), and on PostgreSQL a backslash as E'\\\\'", ErrInvalid)
	}
	return toks, nil
}

// tokenizeMode is tokenize with the server's default quoting, or with alt
// the other one: MySQL without backslash escapes, PostgreSQL with them in
// plain '…' strings.
func tokenizeMode(d Dialect, q string, alt bool) ([]token, error) {
	slash := (d == MySQL) != alt // backslash escapes in '…' (and MySQL "…")
	var toks []token
	add := func(k tokKind, pos, end int, w string) {
		toks = append(toks, token{kind: k, pos: pos, end: end, word: w})
	}
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && strings.HasPrefix(q[i:], "--") && (d != MySQL || i+2 == len(q) || q[i+2] <= ' '):
			// MySQL wants a space or control character after "--": "--1" is
			// minus minus one there, and the rest of the line is SQL.
			i = lineEnd(q, i)
		case c == '#' && d == MySQL:
			i = lineEnd(q, i)
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			if d == MySQL && (strings.HasPrefix(q[i:], "/*!") || strings.HasPrefix(q[i:], "/*M!")) {
				return nil, fmt.Errorf("%w: MySQL runs the body of a /*! … */ comment as SQL, so fence cannot check it; write that SQL without the comment", ErrInvalid)
			}
			j, err := commentEnd(q, i, d == Postgres)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '\'':
			j, err := quotedEnd(q, i, '\'', slash)
			if err != nil {
				return nil, err
			}
			add(tString, i, j, "")
			i = j
		case c == '"':
			// MySQL: a string, with backslash escapes (unless ANSI_QUOTES,
			// where it is a name; its extent is the same for fence's purpose).
			j, err := quotedEnd(q, i, '"', d == MySQL && slash)
			if err != nil {
				return nil, err
			}
			add(map[bool]tokKind{true: tString, false: tQuoted}[d == MySQL], i, j, "")
			i = j
		case c == '`' && d != Postgres:
			j, err := quotedEnd(q, i, '`', false)
			if err != nil {
				return nil, err
			}
			add(tQuoted, i, j, "")
			i = j
		case c == '[' && d == SQLite:
			j := strings.IndexByte(q[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("%w: unterminated [ quoted name in SQL", ErrInvalid)
			}
			add(tQuoted, i, i+j+1, "")
			i += j + 1
		case c == '{' && strings.HasPrefix(q[i:], "{{"):
			m := ""
			for _, k := range []string{FenceMarker, TokenMarker, NowMarker} {
				if strings.HasPrefix(q[i:], k) {
					m = k
				}
			}
			if m == "" {
				add(tOp, i, i+1, "{")
				i++
				continue
			}
			add(tMarker, i, i+len(m), m)
			i += len(m)
		case c == '?':
			j := i + 1
			for j < len(q) && isDigit(q[j]) {
				j++
			}
			if j > i+1 {
				// SQLite's ?NNN; elsewhere a ? glued to a number, which a
				// rebind to $n would turn into another placeholder ($10).
				return nil, fmt.Errorf("%w: numbered placeholder %s: fence places its own arguments by position, so use plain ? placeholders (with a space before a number)", ErrInvalid, q[i:j])
			}
			add(tParam, i, i+1, "?")
			i++
		case c == '$' && d == Postgres:
			j := i + 1
			if j < len(q) && isDigit(q[j]) {
				for j < len(q) && isDigit(q[j]) {
					j++
				}
				n, err := strconv.Atoi(q[i+1 : j])
				if err != nil || n == 0 || n > 65535 {
					return nil, fmt.Errorf("%w: placeholder %s out of range", ErrInvalid, q[i:j])
				}
				toks = append(toks, token{kind: tParam, pos: i, end: j, word: "$", n: n})
				i = j
				continue
			}
			// Dollar quoting: $$…$$ or $tag$…$tag$.
			for j < len(q) && isIdent(q[j]) {
				j++
			}
			if j < len(q) && q[j] == '$' {
				tag := q[i : j+1]
				k := strings.Index(q[j+1:], tag)
				if k < 0 {
					return nil, fmt.Errorf("%w: unterminated dollar-quoted string %s in SQL", ErrInvalid, tag)
				}
				add(tString, i, j+1+k+len(tag), "")
				i = j + 1 + k + len(tag)
				continue
			}
			add(tOp, i, i+1, "$")
			i++
		case d == SQLite && (c == ':' || c == '@' || c == '$') && i+1 < len(q) && isIdent(q[i+1]):
			j := i + 1
			for j < len(q) && (isIdent(q[j]) || q[j] == '$') {
				j++
			}
			if c == '$' && isAllDigits(q[i+1:j]) {
				return nil, fmt.Errorf("%w: %s is a PostgreSQL placeholder; on SQLite use ? placeholders", ErrInvalid, q[i:j])
			}
			return nil, fmt.Errorf("%w: named parameter %s: fence places its own arguments by position, so use ? placeholders", ErrInvalid, q[i:j])
		case isDigit(c) || (c == '.' && i+1 < len(q) && isDigit(q[i+1])):
			j := i + 1
			for j < len(q) && (isIdent(q[j]) || q[j] == '.') {
				j++
			}
			add(tNumber, i, j, "")
			i = j
		case isIdent(c) || (c == '$' && d == MySQL):
			j := i + 1
			for j < len(q) && (isIdent(q[j]) || (q[j] == '$' && d != SQLite)) {
				j++
			}
			w := q[i:j]
			if d == MySQL && c == '$' && isAllDigits(w[1:]) && len(w) > 1 {
				return nil, fmt.Errorf("%w: %s is a PostgreSQL placeholder; on MySQL use ? placeholders", ErrInvalid, w)
			}
			if d == Postgres && (w == "E" || w == "e") && j < len(q) && q[j] == '\'' {
				// E'…': a string with backslash escapes.
				k, err := quotedEnd(q, j, '\'', true)
				if err != nil {
					return nil, err
				}
				add(tString, i, k, "")
				i = k
				continue
			}
			add(tWord, i, j, strings.ToUpper(w))
			i = j
		case c == '(' || c == ')' || c == ',' || c == ';':
			add(tPunct, i, i+1, string(c))
			i++
		default:
			add(tOp, i, i+1, string(c))
			i++
		}
	}
	return toks, nil
}

func lineEnd(q string, i int) int {
	if j := strings.IndexByte(q[i:], '\n'); j >= 0 {
		return i + j + 1
	}
	return len(q)
}

// commentEnd returns the offset after the /* comment at i. PostgreSQL nests
// block comments; SQLite and MySQL end at the first */.
func commentEnd(q string, i int, nested bool) (int, error) {
	depth := 0
	for j := i; j+1 < len(q); {
		switch {
		case q[j] == '/' && q[j+1] == '*' && (nested || depth == 0):
			depth++
			j += 2
		case q[j] == '*' && q[j+1] == '/':
			depth--
			j += 2
			if depth == 0 {
				return j, nil
			}
		default:
			j++
		}
	}
	return 0, fmt.Errorf("%w: unterminated /* comment in SQL", ErrInvalid)
}

// quotedEnd returns the offset after the literal or name opened by quote
// at i. A doubled quote stands for itself; backslash escapes the next byte
// where the dialect says so (MySQL strings, PostgreSQL E'…').
func quotedEnd(q string, i int, quote byte, backslash bool) (int, error) {
	for j := i + 1; j < len(q); j++ {
		switch {
		case backslash && q[j] == '\\':
			j++
		case q[j] == quote:
			if j+1 < len(q) && q[j+1] == quote {
				j++
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

func isAllDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

// splice replaces each marker in query with what repl returns for it, keeping
// the caller's own placeholders and arguments in order. repl receives the
// number of the first placeholder it may use ($N dialects) and returns SQL
// and the arguments of its placeholders. want is how many markers must occur:
// -1 for at least one, 0 for any number, 1 for exactly one; with
// FenceMarker, the statement must also have one of the accepted shapes
// (checkShape).
//
// query must be one statement (a trailing ; is allowed), and its
// placeholders must match args: ? on every dialect, or $1…$n on PostgreSQL
// (not both). On PostgreSQL ? placeholders are rebound to $n.
func splice(d Dialect, query string, args []any, marker string, want int, repl func(first int) (string, []any)) (string, []any, error) {
	p, err := planSplice(d, query, len(args), marker, want)
	if err != nil {
		return "", nil, err
	}
	rebind := p.rebind
	var b strings.Builder
	b.Grow(len(query) + 128*p.markers)
	out := make([]any, 0, len(args)+3*p.markers)
	last, qmarks, argAt := 0, 0, 0
	next := len(args) + 1 // $N dialects: the markers' arguments go after the caller's
	for _, t := range p.acts {
		switch {
		case t.kind == tParam && t.word == "?":
			qmarks++
			if rebind {
				b.WriteString(query[last:t.pos])
				writeApart(&b, query, t, "$"+strconv.Itoa(qmarks))
				last = t.end
			}
		case t.kind == tMarker && t.word == marker:
			b.WriteString(query[last:t.pos])
			sql, extra := repl(next)
			writeApart(&b, query, t, sql)
			last = t.end
			if d == Postgres {
				next += len(extra)
			} else {
				// Positional placeholders: the marker's arguments go where it stands.
				out = append(out, args[argAt:qmarks]...)
				argAt = qmarks
			}
			out = append(out, extra...)
		}
	}
	b.WriteString(query[last:])
	if d == Postgres {
		return b.String(), append(append([]any{}, args...), out...), nil
	}
	return b.String(), append(out, args[argAt:]...), nil
}

// splicePlan is what splice needs of a query once it has been checked: the
// tokens it acts on (? placeholders and the markers), in order.
type splicePlan struct {
	acts    []token
	markers int
	rebind  bool
}

// spliceKey is everything the checks of splice depend on.
type spliceKey struct {
	d           Dialect
	marker      string
	want, nargs int
	query       string
}

// The checked plans of recent queries, so that a statement sent again (the
// common case: a program has a few fenced statements and runs them over and
// over) is not tokenized and checked again on every call; re-parsing was
// ~4 µs and 20–40 allocations per fenced write. Only plans that passed the
// checks are kept, so every refusal is produced by the same code as before,
// every time. Bounded: at spliceCacheMax entries the cache is emptied and
// refilled (a program with more distinct fenced statements than that pays
// the parse again, as before); queries longer than spliceCacheMaxLen are not
// kept, so the cache holds at most spliceCacheMax × spliceCacheMaxLen bytes
// of query text.
const (
	spliceCacheMax    = 1024
	spliceCacheMaxLen = 4096
)

var spliceCache struct {
	sync.RWMutex
	m map[spliceKey]*splicePlan
}

// planSplice returns the checked plan of query, from the cache or by
// checking it (checkSplice).
func planSplice(d Dialect, query string, nargs int, marker string, want int) (*splicePlan, error) {
	k := spliceKey{d: d, marker: marker, want: want, nargs: nargs, query: query}
	spliceCache.RLock()
	p, ok := spliceCache.m[k]
	spliceCache.RUnlock()
	if ok {
		return p, nil
	}
	p, err := checkSplice(d, query, nargs, marker, want)
	if err != nil || len(query) > spliceCacheMaxLen {
		return p, err
	}
	spliceCache.Lock()
	if spliceCache.m == nil || len(spliceCache.m) >= spliceCacheMax {
		spliceCache.m = make(map[spliceKey]*splicePlan)
	}
	spliceCache.m[k] = p
	spliceCache.Unlock()
	return p, nil
}

// checkSplice tokenizes query and runs every check of splice on it.
func checkSplice(d Dialect, query string, nargs int, marker string, want int) (*splicePlan, error) {
	toks, err := tokenize(d, query)
	if err != nil {
		return nil, err
	}
	for i, t := range toks {
		if t.kind == tPunct && t.word == ";" && i != len(toks)-1 {
			return nil, fmt.Errorf("%w: SQL must be one statement, but it has a ; before more SQL (a second statement would run without the fence); send each statement on its own", ErrInvalid)
		}
	}
	var hits []int
	for i, t := range toks {
		if t.kind == tMarker && t.word == marker {
			hits = append(hits, i)
		}
	}
	switch {
	case want == 1 && len(hits) != 1:
		return nil, fmt.Errorf("%w: SQL must contain %s exactly once, found it %d times (outside literals and comments)", ErrInvalid, marker, len(hits))
	case want < 0 && len(hits) == 0:
		return nil, fmt.Errorf("%w: SQL must contain %s at least once", ErrInvalid, marker)
	}
	if marker == FenceMarker && len(hits) == 1 {
		if err := checkShape(d, toks, hits[0]); err != nil {
			return nil, err
		}
	}
	rebind, err := checkParams(d, toks, nargs)
	if err != nil {
		return nil, err
	}
	p := &splicePlan{markers: len(hits), rebind: rebind}
	for _, t := range toks {
		if t.kind == tParam && t.word == "?" || t.kind == tMarker && t.word == marker {
			p.acts = append(p.acts, t)
		}
	}
	return p, nil
}

// writeApart writes s in place of token t of query, with a space on a side
// where s would otherwise run into a name or a $: "WHERE{{fence}}" must not
// become the name WHEREEXISTS, nor "$?" the dollar quote $$1.
func writeApart(b *strings.Builder, query string, t token, s string) {
	glues := func(c byte) bool { return isIdent(c) || c == '$' }
	if t.pos > 0 && glues(query[t.pos-1]) {
		b.WriteByte(' ')
	}
	b.WriteString(s)
	if t.end < len(query) && glues(query[t.end]) {
		b.WriteByte(' ')
	}
}

// checkParams checks the caller's placeholders against nargs arguments and
// reports whether ? placeholders must be rebound to $n (PostgreSQL).
func checkParams(d Dialect, toks []token, nargs int) (rebind bool, err error) {
	qmarks := 0
	var seen []bool
	maxN := 0
	for _, t := range toks {
		if t.kind != tParam {
			continue
		}
		if t.word == "?" {
			qmarks++
			continue
		}
		for len(seen) <= t.n {
			seen = append(seen, false)
		}
		seen[t.n] = true
		maxN = max(maxN, t.n)
	}
	if maxN > 0 && qmarks > 0 {
		return false, fmt.Errorf("%w: SQL mixes ? and $n placeholders; use one style (? is rebound to $n on PostgreSQL; every ? counts as a placeholder, so write jsonb's ?, ?| and ?& operators as jsonb_exists, jsonb_exists_any and jsonb_exists_all)", ErrInvalid)
	}
	if maxN > 0 {
		for n := 1; n <= maxN; n++ {
			if !seen[n] {
				return false, fmt.Errorf("%w: SQL uses placeholders up to $%d but not $%d; number them $1…$%d without gaps", ErrInvalid, maxN, n, maxN)
			}
		}
		if maxN != nargs {
			return false, fmt.Errorf("%w: SQL uses placeholders $1…$%d but %d arguments were given", ErrInvalid, maxN, nargs)
		}
		return false, nil
	}
	if qmarks != nargs {
		return false, fmt.Errorf("%w: SQL has %d ? placeholders but %d arguments were given", ErrInvalid, qmarks, nargs)
	}
	return d == Postgres && qmarks > 0, nil
}

// How to write a fenced statement; ends most refusals.
const shapeHint = "write UPDATE … WHERE (your condition) AND {{fence}}, DELETE … WHERE (your condition) AND {{fence}}, or INSERT INTO t (…) SELECT … WHERE (your condition) AND {{fence}}"

// checkShape refuses every statement in which the fence predicate, put at
// toks[m], might not guard every row written. Accepted: one UPDATE, DELETE,
// INSERT … SELECT or REPLACE … SELECT, optionally after a WITH of read-only
// CTEs, with the marker as a top-level AND conjunct of the WHERE of the
// statement (of the SELECT feeding the INSERT), and no top-level OR, XOR or
// set operation. The package doc's table lists the shapes.
func checkShape(d Dialect, toks []token, m int) error {
	if n := len(toks); n > 0 && toks[n-1].kind == tPunct && toks[n-1].word == ";" {
		toks = toks[:n-1]
	}
	// Parenthesis and CASE … END nesting of every token.
	paren := make([]int, len(toks))
	cases := make([]int, len(toks))
	p, c := 0, 0
	for i, t := range toks {
		if t.kind == tPunct && t.word == ")" {
			p--
		}
		if t.kind == tWord && t.word == "END" && c > 0 {
			c--
		}
		paren[i], cases[i] = p, c
		if t.kind == tPunct && t.word == "(" {
			p++
		}
		if t.kind == tWord && t.word == "CASE" {
			c++
		}
		if p < 0 {
			return fmt.Errorf("%w: unbalanced parentheses in SQL", ErrInvalid)
		}
	}
	if p != 0 {
		return fmt.Errorf("%w: unbalanced parentheses in SQL", ErrInvalid)
	}
	top := func(i int) bool { return paren[i] == 0 && cases[i] == 0 }
	isWord := func(i int, ws ...string) bool {
		if i < 0 || i >= len(toks) || toks[i].kind != tWord {
			return false
		}
		for _, w := range ws {
			if toks[i].word == w {
				return true
			}
		}
		return false
	}

	if paren[m] > 0 {
		return fmt.Errorf("%w: {{fence}} is inside parentheses (a subquery, a function call or a parenthesised condition), where it may not guard every row written; make it a top-level AND condition of the statement's WHERE: %s", ErrInvalid, shapeHint)
	}
	if cases[m] > 0 {
		return fmt.Errorf("%w: {{fence}} is inside a CASE expression, where it does not decide whether rows are written; make it a top-level AND condition of the statement's WHERE: %s", ErrInvalid, shapeHint)
	}

	// The statement's own verb, after an optional WITH.
	stmt := -1
	if isWord(0, "WITH") {
		for i := 1; i < len(toks); i++ {
			if top(i) && isWord(i, "SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "VALUES", "TABLE", "MERGE") {
				stmt = i
				break
			}
		}
	} else if len(toks) > 0 && toks[0].kind == tWord {
		stmt = 0
	}
	verb := ""
	if stmt >= 0 {
		verb = toks[stmt].word
	}
	switch verb {
	case "UPDATE", "DELETE", "INSERT", "REPLACE":
	case "SELECT", "VALUES", "TABLE":
		return fmt.Errorf("%w: {{fence}} guards a write, and a %s writes nothing; to read while holding the lease, use CheckTx in a transaction, or %s", ErrInvalid, verb, shapeHint)
	default:
		what := "this statement"
		if verb != "" {
			what = verb
		}
		return fmt.Errorf("%w: {{fence}} is accepted in UPDATE, DELETE and INSERT … SELECT only, not in %s: %s", ErrInvalid, what, shapeHint)
	}

	// Nothing else in the statement may write: a data-modifying CTE commits
	// whatever the guarded statement does.
	for i, t := range toks {
		if i == stmt || t.kind != tWord {
			continue
		}
		switch t.word {
		case "UPDATE":
			if isWord(i-1, "FOR", "KEY", "DO") { // FOR [NO KEY] UPDATE, DO UPDATE, DUPLICATE KEY UPDATE
				continue
			}
		case "INSERT":
			if d == MySQL && i+1 < len(toks) && toks[i+1].kind == tPunct && toks[i+1].word == "(" {
				continue // MySQL's INSERT() string function
			}
		case "DELETE", "MERGE":
		default:
			continue
		}
		return fmt.Errorf("%w: {{fence}} guards one write, but the statement has another: the %s inside it (a data-modifying WITH, or a subquery) would commit without the fence; run it as its own fenced statement in the same transaction (if %s is a column name, quote it)", ErrInvalid, t.word, t.word)
	}

	// A set operation at the top joins SELECTs the fence does not guard.
	for i := stmt + 1; i < len(toks); i++ {
		if top(i) && isWord(i, "UNION", "INTERSECT", "EXCEPT", "MINUS") {
			return fmt.Errorf("%w: a top-level %s joins a SELECT that {{fence}} does not guard; put the set operation in a subquery and guard the outer SELECT: INSERT INTO t (…) SELECT * FROM (… %s …) AS u WHERE {{fence}}", ErrInvalid, toks[i].word, toks[i].word)
		}
	}

	// The WHERE the marker belongs to: the nearest top-level WHERE before it,
	// with no other clause between them.
	clauseEnd := func(i int) bool {
		if isWord(i, "FROM") && isWord(i-1, "DISTINCT") {
			return false // IS [NOT] DISTINCT FROM
		}
		return top(i) && isWord(i, "RETURNING", "ORDER", "LIMIT", "GROUP", "HAVING", "WINDOW", "OFFSET", "FETCH", "FOR", "ON", "LOCK", "SET", "FROM", "USING", "INTO", "VALUES", "SELECT")
	}
	w := -1
	for i := m - 1; i > stmt; i-- {
		if top(i) && isWord(i, "WHERE") {
			w = i
			break
		}
		if clauseEnd(i) {
			break
		}
	}
	if w < 0 {
		return fmt.Errorf("%w: {{fence}} must be a condition of the statement's WHERE (it is in another clause here): %s", ErrInvalid, shapeHint)
	}
	if verb == "INSERT" || verb == "REPLACE" {
		sel := -1
		for i := stmt + 1; i < w; i++ {
			if top(i) && isWord(i, "SELECT") {
				sel = i
			}
			if top(i) && isWord(i, "ON") && isWord(i+1, "CONFLICT", "DUPLICATE") {
				sel = -1
				break
			}
		}
		if sel < 0 {
			return fmt.Errorf("%w: in an %s, {{fence}} must be in the WHERE of the SELECT that feeds it, before any ON CONFLICT or ON DUPLICATE KEY clause (INSERT … VALUES, or the marker in an upsert's DO UPDATE, leaves the inserted rows unguarded): INSERT INTO t (…) SELECT … WHERE (your condition) AND {{fence}} [ON CONFLICT …]", ErrInvalid, verb)
		}
	}

	// The WHERE's top-level conjuncts: no OR (nor XOR or MySQL's ||, which
	// bind looser than AND), and the marker standing alone between ANDs.
	end := len(toks)
	for i := m + 1; i < len(toks); i++ {
		if clauseEnd(i) {
			end = i
			break
		}
	}
	between := 0
	conj := map[int]bool{} // ANDs that join conjuncts (not a BETWEEN's)
	for i := w + 1; i < end; i++ {
		if !top(i) {
			continue
		}
		t := toks[i]
		switch {
		case isWord(i, "OR"), d == MySQL && isWord(i, "XOR"):
			return fmt.Errorf("%w: the WHERE has a top-level %s, so {{fence}} would guard only one side of it; parenthesise your condition: WHERE (a %s b) AND {{fence}}", ErrInvalid, t.word, t.word)
		case d == MySQL && t.kind == tOp && t.word == "|" && i+1 < end && toks[i+1].kind == tOp && toks[i+1].word == "|" && toks[i+1].pos == t.end:
			return fmt.Errorf("%w: the WHERE has a top-level || (OR on MySQL), so {{fence}} would guard only one side of it; parenthesise your condition: WHERE (a OR b) AND {{fence}}", ErrInvalid)
		case isWord(i, "BETWEEN"):
			between++
		case isWord(i, "AND"):
			if between > 0 {
				between--
			} else {
				conj[i] = true
			}
		}
	}
	prevOK := m-1 == w || conj[m-1]
	nextOK := m+1 == end || conj[m+1]
	if !prevOK && isWord(m-1, "AND") {
		return fmt.Errorf("%w: {{fence}} is the upper bound of a BETWEEN, not a condition; parenthesise the BETWEEN and add the marker as its own condition: WHERE (x BETWEEN a AND b) AND {{fence}}", ErrInvalid)
	}
	if !prevOK || !nextOK {
		return fmt.Errorf("%w: {{fence}} must stand alone as a top-level conjunct of the WHERE, joined by AND (here it is an operand of a neighbouring operator, such as NOT or IS); %s", ErrInvalid, shapeHint)
	}
	return nil
}
