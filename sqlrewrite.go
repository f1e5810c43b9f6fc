package fence

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
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

// The rewrite works on tokens, not on a parse tree. fence does not need to
// find where the caller's condition ends to fence the statement: the guard
// goes where fence puts it (at the front of the statement's WHERE, with the
// caller's whole condition parenthesised after it, or around the SELECT
// that feeds an INSERT), so an OR, an aggregate or a keyword used as a
// column name inside the caller's SQL cannot take rows out from under it
// (docs/adr/0007-guard-placement.md). What the tokens still decide is where
// literals, quoted names and comments begin and end, and where the statement
// ends; there the tokenizer follows the servers' lexers and refuses every
// spelling on which the servers (or their versions and settings) disagree.

type tokKind uint8

const (
	tWord   tokKind = iota // keyword or unquoted name
	tQuoted                // quoted name, or an unquoted word that can only be a name
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
// whitespace. It refuses what it cannot delimit as every supported server
// would: unterminated literals and comments, MySQL's executable comments,
// placeholder forms whose argument positions fence cannot know, bytes that
// are not valid UTF-8, control characters outside string literals (the
// servers disagree on which end a -- comment or count as space), and a
// number glued to a word (1.0OR, 0x1F, 1_000: read as one token, or as a
// number and a word, depending on the server and its version). It also
// refuses a statement whose tokens depend on a server setting: a backslash
// before a quote ends a literal or not depending on MySQL's sql_mode
// (NO_BACKSLASH_ESCAPES, ANSI_QUOTES) or PostgreSQL's
// standard_conforming_strings, and either reading might hide SQL.
func tokenize(d Dialect, q string) ([]token, error) {
	if !utf8.ValidString(q) {
		return nil, fmt.Errorf("%w: SQL is not valid UTF-8; send text as UTF-8 and binary values as bound parameters", ErrInvalid)
	}
	if err := trailByte(d, q); err != nil {
		return nil, err
	}
	toks, err := tokenizeMode(d, q, false)
	if err != nil {
		return nil, err
	}
	if d != SQLite {
		alt, err := tokenizeMode(d, q, true)
		same := err == nil && len(alt) == len(toks)
		for i := 0; same && i < len(toks); i++ {
			same = alt[i].pos == toks[i].pos && alt[i].end == toks[i].end
		}
		if !same {
			return nil, fmt.Errorf("%w: a backslash before a quote makes this SQL read differently depending on the server's settings (MySQL NO_BACKSLASH_ESCAPES or ANSI_QUOTES, PostgreSQL standard_conforming_strings); write a quote inside a literal by doubling it ('it''s'), and on PostgreSQL a backslash as E'\\\\'", ErrInvalid)
		}
	}
	markNames(toks, q)
	return toks, nil
}

// trailByte refuses a backslash (and on MySQL a backtick) right after a
// non-ASCII character. In the client character sets where a multibyte
// character's second byte can be ASCII (GBK, GB18030, BIG5, SJIS, CP932:
// 0x40–0x7E), the server reads the last byte of the UTF-8 character and
// the backslash or backtick after it as one character, and a literal or a
// quoted name then ends elsewhere than fence reads it. fence refuses those
// encodings when a store opens (CheckSession), but the caller's own
// transaction can set one (SET NAMES gbk, SET client_encoding), so the
// spelling is refused wherever it may be sent (the oracle's catch,
// fencetest OracleCatches). SQLite reads every statement as UTF-8.
func trailByte(d Dialect, q string) error {
	if d == SQLite {
		return nil
	}
	for i := 1; i < len(q); i++ {
		if q[i-1] < 0x80 || (q[i] != '\\' && (q[i] != '`' || d != MySQL)) {
			continue
		}
		return fmt.Errorf("%w: SQL has %q right after a non-ASCII character (byte %d): in a client character set such as GBK, BIG5 or SJIS, which a transaction can switch to, the server reads the two as one character and a literal or quoted name ends elsewhere; put a space or another ASCII character between them, or bind the value as a parameter", ErrInvalid, q[i:i+1], i)
	}
	return nil
}

// markNames turns into names the words that the servers read as names
// whatever they spell: a word next to a "." (t.where, lock.x: after a dot
// even a reserved word is a column name on PostgreSQL and MySQL) and a word
// after AS (PostgreSQL takes any keyword as an alias there).
func markNames(toks []token, q string) {
	dot := func(i int) bool { return i >= 0 && i < len(toks) && toks[i].kind == tOp && toks[i].word == "." }
	for i := range toks {
		if toks[i].kind != tWord {
			continue
		}
		if dot(i-1) || dot(i+1) || i > 0 && toks[i-1].kind == tWord && toks[i-1].word == "AS" {
			toks[i].kind = tQuoted
		}
	}
}

// ctlError refuses a control character outside a string literal.
func ctlError(q string, i int) error {
	return fmt.Errorf("%w: SQL has the control character %U at byte %d outside a string literal; the servers disagree on whether such a byte is space or ends a -- comment (a bare carriage return ends one on PostgreSQL only), so use spaces, tabs and newlines (CR LF is fine)", ErrInvalid, rune(q[i]), i)
}

// blank reports whether q[i] is whitespace that every server reads as
// such: space, tab, newline, and a carriage return before a newline.
func blank(q string, i int) bool {
	switch q[i] {
	case ' ', '\t', '\n':
		return true
	case '\r':
		return i+1 < len(q) && q[i+1] == '\n'
	}
	return false
}

// control reports whether c is a control character (C0 or DEL).
func control(c byte) bool { return c < 0x20 || c == 0x7f }

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
		case blank(q, i):
			i++
		case control(c):
			return nil, ctlError(q, i)
		case c == '-' && strings.HasPrefix(q[i:], "--") && (d != MySQL || i+2 == len(q) || blank(q, i+2) || control(q[i+2])):
			// MySQL wants a space or control character after "--": "--1" is
			// minus minus one there, and the rest of the line is SQL.
			j, err := lineEnd(q, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '#' && d == MySQL:
			j, err := lineEnd(q, i)
			if err != nil {
				return nil, err
			}
			i = j
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
			// SQLite is handed a C string and stops reading at a NUL: the
			// rest of the text, the rewrite's closing part included, would
			// be gone (TestSQLiteBoundaries' catch).
			if k := strings.IndexByte(q[i:i+j], 0); k >= 0 {
				return nil, fmt.Errorf("%w: SQL has a NUL byte inside a [ quoted name at byte %d", ErrInvalid, i+k)
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
				if j < len(q) && (isIdent(q[j]) || q[j] == '$' || q[j] == '.') {
					return nil, gluedError(q, i, j)
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
				if n := strings.IndexByte(q[j+1:j+1+k], 0); n >= 0 {
					return nil, fmt.Errorf("%w: SQL has a NUL byte inside a dollar-quoted string at byte %d; bind such a value as a parameter", ErrInvalid, j+1+n)
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
			j := numberEnd(q, i)
			if j < len(q) && (isIdent(q[j]) || q[j] == '$' || q[j] == '.') {
				return nil, gluedError(q, i, j)
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

// numberEnd returns the end of the numeric literal at i: digits, an
// optional fraction, an optional exponent with digits. Anything glued to
// it is refused by the caller (gluedError).
func numberEnd(q string, i int) int {
	j := i
	for j < len(q) && isDigit(q[j]) {
		j++
	}
	if j < len(q) && q[j] == '.' {
		j++
		for j < len(q) && isDigit(q[j]) {
			j++
		}
	}
	if j < len(q) && (q[j] == 'e' || q[j] == 'E') {
		k := j + 1
		if k < len(q) && (q[k] == '+' || q[k] == '-') {
			k++
		}
		if k < len(q) && isDigit(q[k]) {
			for k < len(q) && isDigit(q[k]) {
				k++
			}
			j = k
		}
	}
	return j
}

func gluedError(q string, i, j int) error {
	k := j
	for k < len(q) && (isIdent(q[k]) || q[k] == '$' || q[k] == '.') && k-i < 24 {
		k++
	}
	return fmt.Errorf("%w: %q is a number glued to a word: the servers read it as one token or as two, by server and version (MariaDB and PostgreSQL before 15 read 1.0OR as 1.0 OR), so put a space after the number, write hex as X'1F', and drop digit separators", ErrInvalid, q[i:k])
}

// lineEnd returns the offset after the -- or # comment at i. The comment
// must not hold a control character: PostgreSQL ends it at a bare carriage
// return, the others at the newline only.
func lineEnd(q string, i int) (int, error) {
	for j := i; j < len(q); j++ {
		switch {
		case q[j] == '\n':
			return j + 1, nil
		case control(q[j]) && !blank(q, j):
			return 0, ctlError(q, j)
		}
	}
	return len(q), nil
}

// commentEnd returns the offset after the /* comment at i. PostgreSQL nests
// block comments; SQLite and MySQL end at the first */.
func commentEnd(q string, i int, nested bool) (int, error) {
	depth := 0
	for j := i; j+1 < len(q); {
		switch {
		case control(q[j]) && !blank(q, j):
			return 0, ctlError(q, j)
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
// where the dialect says so (MySQL strings, PostgreSQL E'…'). A NUL byte is
// refused: PostgreSQL cannot take one in a statement's text at all.
func quotedEnd(q string, i int, quote byte, backslash bool) (int, error) {
	for j := i + 1; j < len(q); j++ {
		switch {
		case q[j] == 0:
			return 0, fmt.Errorf("%w: SQL has a NUL byte inside a literal; bind such a value as a parameter", ErrInvalid)
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
// -1 for at least one, 0 for any number, 1 for exactly one.
//
// FenceMarker is different: the guard repl returns is not put where the
// marker stands but where fence places it (placeFence), and the marker
// itself becomes a condition that is always true.
//
// query must be one statement (a trailing ; is allowed), and its
// placeholders must match args: ? on every dialect, or $1…$n on PostgreSQL
// (not both). On PostgreSQL ? placeholders are rebound to $n.
func splice(d Dialect, query string, args []any, marker string, want int, repl func(first int) (string, []any)) (string, []any, error) {
	p, err := planSplice(d, query, len(args), marker, want)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	b.Grow(len(query) + 160*max(p.markers, 1))
	out := make([]any, 0, len(args)+3*max(p.markers, 1))
	last, qmarks, argAt := 0, 0, 0
	next := len(args) + 1 // $N dialects: the markers' arguments go after the caller's
	// emit writes repl's SQL (between pre and post) at pos and places its
	// arguments.
	emit := func(pos int, pre, post string) {
		sql, extra := repl(next)
		writeApart(&b, query, pos, pos, pre+sql+post)
		if d == Postgres {
			next += len(extra)
		} else {
			// Positional placeholders: the arguments go where the SQL stands.
			out = append(out, args[argAt:qmarks]...)
			argAt = qmarks
		}
		out = append(out, extra...)
	}
	for _, a := range p.acts {
		b.WriteString(query[last:a.pos])
		last = a.pos
		switch a.kind {
		case actParam:
			qmarks++
			if p.rebind {
				writeApart(&b, query, a.pos, a.end, "$"+strconv.Itoa(qmarks))
				last = a.end
			}
		case actRepl:
			sql, extra := repl(next)
			writeApart(&b, query, a.pos, a.end, sql)
			last = a.end
			if d == Postgres {
				next += len(extra)
			} else {
				out = append(out, args[argAt:qmarks]...)
				argAt = qmarks
			}
			out = append(out, extra...)
		case actText:
			writeApart(&b, query, a.pos, a.end, a.text)
			last = a.end
		case actGuard:
			emit(a.pos, a.text, a.post)
		}
	}
	b.WriteString(query[last:])
	if d == Postgres {
		return b.String(), append(append([]any{}, args...), out...), nil
	}
	return b.String(), append(out, args[argAt:]...), nil
}

// actKind says what splice does at a place in the query.
type actKind uint8

const (
	actParam actKind = iota // a ? placeholder: count it, rebind it on PostgreSQL
	actRepl                 // a marker replaced by what repl returns
	actText                 // the span replaced by text (an insertion where pos == end)
	actGuard                // repl's SQL inserted at pos, between text and post
)

type act struct {
	kind       actKind
	pos, end   int
	text, post string
}

// splicePlan is what splice needs of a query once it has been checked: what
// to do where, in order of position.
type splicePlan struct {
	acts    []act
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
	rebind, err := checkParams(d, toks, nargs)
	if err != nil {
		return nil, err
	}
	p := &splicePlan{markers: len(hits), rebind: rebind}
	var placed []act
	if marker == FenceMarker {
		if placed, err = placeFence(d, toks, hits[0]); err != nil {
			return nil, err
		}
	}
	for _, t := range toks {
		switch {
		case t.kind == tParam && t.word == "?":
			p.acts = append(p.acts, act{kind: actParam, pos: t.pos, end: t.end})
		case t.kind == tMarker && t.word == marker && marker != FenceMarker:
			p.acts = append(p.acts, act{kind: actRepl, pos: t.pos, end: t.end})
		}
	}
	p.acts = append(p.acts, placed...)
	sortActs(p.acts)
	return p, nil
}

// writeApart writes s in place of query[pos:end], with a space on a side
// where s would otherwise run into a name or a $: "WHERE{{fence}}" must not
// become the name WHERETRUE, nor "$?" the dollar quote $$1.
func writeApart(b *strings.Builder, query string, pos, end int, s string) {
	glues := func(c byte) bool { return isIdent(c) || c == '$' }
	if s == "" {
		return
	}
	// What precedes s is what was written before it, not query[pos-1]: a
	// rebound placeholder before it ends in a digit where the query had a ?
	// (?? became $2$3, one glued token, caught by FuzzSplice). An empty
	// builder (a piece written on its own) falls back to the query.
	var prev byte
	if n := b.Len(); n > 0 {
		prev = b.String()[n-1]
	} else if pos > 0 {
		prev = query[pos-1]
	}
	if prev != 0 && glues(prev) && glues(s[0]) {
		b.WriteByte(' ')
	}
	b.WriteString(s)
	// A number (a rebound $N) before a dot reads as a decimal to fence's
	// tokenizer ($1.$2 from ?.?, FuzzSplice): keep them apart too.
	last := s[len(s)-1]
	if end < len(query) && (glues(query[end]) && glues(last) || query[end] == '.' && isDigit(last)) {
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

// markerTrue is what {{fence}} becomes: a condition that is always true.
// Not TRUE: on SQLite a column named "true" takes that name's place.
const markerTrue = "(1 = 1)"

// placeFence decides where the guard goes in the statement whose marker is
// toks[m], and returns the insertions (and the marker's replacement) in
// order of position. The guard's place does not depend on where the
// caller's own condition ends, nor on what is inside it:
//
//   - UPDATE and DELETE: right after the statement's WHERE, followed by
//     AND and the caller's whole condition in parentheses:
//     WHERE <guard> AND (<caller's condition>) [RETURNING …|ORDER BY …|LIMIT …].
//     An OR, XOR or || inside it, a keyword used as a column name, a CASE:
//     none can reach outside the parentheses. Misjudging where the
//     condition starts or ends can only put a parenthesis where the server
//     refuses it (a syntax error, nothing written).
//   - INSERT and REPLACE fed by a SELECT: the guard bounds the SELECT's
//     whole result from outside. On SQLite the SELECT is wrapped:
//     INSERT INTO t (…) SELECT * FROM (<caller's SELECT>) AS fence_src WHERE <guard>;
//     on MySQL through a CTE with a column list (a derived table there
//     refuses two columns of the same name, as SELECT ?, ? has):
//     INSERT INTO t (…) WITH fence_src (fence_c1, …) AS (<caller's SELECT>) SELECT * FROM fence_src WHERE <guard>;
//     on PostgreSQL by a LIMIT of no rows unless the guard holds:
//     INSERT INTO t (…) <caller's SELECT> LIMIT CASE WHEN <guard> THEN NULL ELSE 0 END,
//     or, when the SELECT has a LIMIT of its own, wrapped as on SQLite.
//     An aggregate without GROUP BY, HAVING, GROUP BY (), DISTINCT, a
//     window or a set operation in the caller's SELECT cannot make a row
//     the guard does not see.
//
// The marker, where the caller wrote it, becomes markerTrue. It must be a
// condition (after WHERE or AND, before AND, a closing parenthesis or the
// end of its clause) within the guarded part: that rule only keeps the
// statement meaning what it says (NOT {{fence}} would never write), the
// fence does not rest on it.
func placeFence(d Dialect, toks []token, m int) ([]act, error) {
	if n := len(toks); n > 0 && toks[n-1].kind == tPunct && toks[n-1].word == ";" {
		toks = toks[:n-1]
	}
	depth := make([]int, len(toks))
	p := 0
	for i, t := range toks {
		if t.kind == tPunct && t.word == ")" {
			p--
		}
		depth[i] = p
		if t.kind == tPunct && t.word == "(" {
			p++
		}
		if p < 0 {
			return nil, fmt.Errorf("%w: unbalanced parentheses in SQL", ErrInvalid)
		}
	}
	if p != 0 {
		return nil, fmt.Errorf("%w: unbalanced parentheses in SQL", ErrInvalid)
	}
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
	top := func(i int) bool { return depth[i] == 0 }

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
		return nil, fmt.Errorf("%w: {{fence}} guards a write, and a %s writes nothing; to read while holding the lease, use CheckTx in a transaction, or %s", ErrInvalid, verb, shapeHint)
	default:
		what := "this statement"
		if verb != "" {
			what = verb
		}
		return nil, fmt.Errorf("%w: {{fence}} is accepted in UPDATE, DELETE and INSERT … SELECT only, not in %s: %s", ErrInvalid, what, shapeHint)
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
		return nil, fmt.Errorf("%w: {{fence}} guards one write, but the statement has another: the %s inside it (a data-modifying WITH, or a subquery) would commit without the fence; run it as its own fenced statement in the same transaction (if %s is a column name, quote it)", ErrInvalid, t.word, t.word)
	}

	// from and to delimit the guarded part: the WHERE's condition, or the
	// SELECT feeding the INSERT.
	var from, to int
	var acts []act
	switch verb {
	case "UPDATE", "DELETE":
		w := -1
		for i := stmt + 1; i < len(toks); i++ {
			if top(i) && isWord(i, "WHERE") {
				w = i
				break
			}
		}
		if w < 0 {
			return nil, fmt.Errorf("%w: {{fence}} must be a condition of the statement's WHERE, and this %s has no WHERE: %s", ErrInvalid, verb, shapeHint)
		}
		if isWord(w+1, "CURRENT") && isWord(w+2, "OF") {
			return nil, fmt.Errorf("%w: WHERE CURRENT OF a cursor cannot carry the fence; %s", ErrInvalid, shapeHint)
		}
		from, to = w+1, len(toks)
		for i := from; i < len(toks); i++ {
			if top(i) && isWord(i, "RETURNING", "ORDER", "LIMIT") {
				to = i
				break
			}
		}
		if to == from {
			return nil, fmt.Errorf("%w: the WHERE is empty; %s", ErrInvalid, shapeHint)
		}
		acts = append(acts,
			act{kind: actGuard, pos: toks[w].end, end: toks[w].end, text: " ", post: " AND ("},
			act{kind: actText, pos: toks[to-1].end, end: toks[to-1].end, text: ")"})
	case "INSERT", "REPLACE":
		s := -1
		for i := stmt + 1; i < len(toks); i++ {
			if !top(i) {
				continue
			}
			if isWord(i, "SELECT", "WITH") {
				s = i
				break
			}
			if isWord(i, "VALUES", "VALUE", "SET", "DEFAULT", "TABLE") {
				break
			}
		}
		if s < 0 {
			return nil, fmt.Errorf("%w: an %s with {{fence}} must be fed by a SELECT, written without parentheses around it (INSERT … VALUES cannot be fenced: its rows are written whatever the fence says): INSERT INTO t (…) SELECT … WHERE (your condition) AND {{fence}}", ErrInvalid, verb)
		}
		from, to = s, len(toks)
		for i := s + 1; i < len(toks); i++ {
			if top(i) && (isWord(i, "RETURNING") || isWord(i, "ON") && isWord(i+1, "CONFLICT", "DUPLICATE")) {
				to = i
				break
			}
		}
		open, close, post := "SELECT * FROM (", ") AS fence_src WHERE ", ""
		limited := false
		for i := s; i < to; i++ {
			limited = limited || top(i) && isWord(i, "LIMIT", "FETCH")
		}
		switch {
		case d == Postgres && !limited:
			// A LIMIT of no rows unless the guard holds, at the end of the
			// caller's SELECT: it bounds the whole result (of a set
			// operation too), PostgreSQL evaluates it before it pulls a
			// row, and the SELECT stays the INSERT's own, so its untyped
			// parameters still take the target columns' types (in a
			// subquery they would become text).
			open, close, post = "", " LIMIT CASE WHEN ", " THEN NULL ELSE 0 END"
		case d == MySQL:
			// A CTE with a column list: a derived table on MySQL and
			// MariaDB refuses two columns of the same name. The count
			// is the target's column list's; a wrong count is refused
			// by the server (the CTE's and the INSERT's counts must both
			// match the SELECT's).
			n, ok := targetColumns(toks, depth, s)
			if !ok {
				return nil, fmt.Errorf("%w: on MySQL an %s … SELECT with {{fence}} must name its target columns: %s INTO t (a, b) SELECT …", ErrInvalid, verb, verb)
			}
			cols := make([]string, n)
			for i := range cols {
				cols[i] = "fence_c" + strconv.Itoa(i+1)
			}
			open = "WITH fence_src (" + strings.Join(cols, ", ") + ") AS ("
			close = ") SELECT * FROM fence_src WHERE "
		}
		if open != "" {
			acts = append(acts, act{kind: actText, pos: toks[s].pos, end: toks[s].pos, text: open})
		}
		acts = append(acts, act{kind: actGuard, pos: toks[to-1].end, end: toks[to-1].end, text: close, post: post})
	}
	if m < from || m >= to {
		return nil, fmt.Errorf("%w: {{fence}} must be a condition of the statement's WHERE (of the SELECT feeding an INSERT); here it is in another clause: %s", ErrInvalid, shapeHint)
	}
	if err := markerIsCondition(toks, depth, m, from, to, isWord); err != nil {
		return nil, err
	}
	acts = append(acts, act{kind: actText, pos: toks[m].pos, end: toks[m].end, text: markerTrue})
	return acts, nil
}

// targetColumns counts the columns of the INSERT's target column list, the
// parenthesised list that ends right before the SELECT at s.
func targetColumns(toks []token, depth []int, s int) (int, bool) {
	if s < 1 || toks[s-1].kind != tPunct || toks[s-1].word != ")" {
		return 0, false
	}
	n := 1
	for i := s - 2; i >= 0; i-- {
		if depth[i] == 0 && toks[i].kind == tPunct && toks[i].word == "(" {
			return n, i+1 < s-1
		}
		if depth[i] == 1 && toks[i].kind == tPunct && toks[i].word == "," {
			n++
		}
	}
	return 0, false
}

// markerIsCondition checks that the marker at m stands as a condition of
// its own: after WHERE, a conjunction's AND or an opening parenthesis, and
// before AND, a closing parenthesis or the end of its clause.
func markerIsCondition(toks []token, depth []int, m, from, to int, isWord func(int, ...string) bool) error {
	punct := func(i int, p string) bool { return toks[i].kind == tPunct && toks[i].word == p }
	prevOK := isWord(m-1, "WHERE") || punct(m-1, "(")
	if isWord(m-1, "AND") {
		// A BETWEEN's AND, unless as many conjunctions' ANDs follow
		// the BETWEEN before the marker.
		between := 0
		for i := m - 2; i >= from && depth[i] >= depth[m]; i-- {
			if depth[i] != depth[m] {
				continue
			}
			if isWord(i, "WHERE") || punct(i, "(") {
				break
			}
			if isWord(i, "BETWEEN") {
				between++
			}
			if isWord(i, "AND") && between == 0 {
				break
			}
			if isWord(i, "AND") && between > 0 {
				between--
			}
		}
		if between > 0 {
			return fmt.Errorf("%w: {{fence}} is the upper bound of a BETWEEN, not a condition; parenthesise the BETWEEN and add the marker as its own condition: WHERE (x BETWEEN a AND b) AND {{fence}}", ErrInvalid)
		}
		prevOK = true
	}
	nextOK := m+1 >= to || punct(m+1, ")") ||
		isWord(m+1, "AND", "GROUP", "ORDER", "LIMIT", "HAVING", "WINDOW", "UNION", "INTERSECT", "EXCEPT", "MINUS", "OFFSET", "FETCH", "FOR", "LOCK", "RETURNING", "ON") ||
		// a AND {{fence}} OR b: the marker is a conjunct of a AND …,
		// where its TRUE changes nothing; {{fence}} OR b would drop b.
		isWord(m-1, "AND") && isWord(m+1, "OR", "XOR")
	if !prevOK || !nextOK {
		return fmt.Errorf("%w: {{fence}} must stand alone as a condition joined by AND (here it is an operand of a neighbouring operator or keyword, such as NOT, IS, THEN or a comparison); %s", ErrInvalid, shapeHint)
	}
	return nil
}

// sortActs orders the acts by position; an insertion goes before a token
// that starts where it is, and acts at the same place keep their order.
func sortActs(acts []act) {
	key := func(a act) int {
		k := 2 * a.pos
		if a.end > a.pos {
			k++
		}
		return k
	}
	sort.SliceStable(acts, func(i, j int) bool { return key(acts[i]) < key(acts[j]) })
}
