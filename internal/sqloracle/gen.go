package sqloracle

import (
	"math/rand/v2"
	"strings"

	"github.com/fencekit/fence"
)

// Generate makes statement index of the run seeded with seed. The same
// schema, seed and index give the same statement.
//
// Every statement is one of the shapes fence accepts (UPDATE, DELETE,
// INSERT … SELECT, REPLACE … SELECT, upserts, RETURNING, ORDER BY/LIMIT and
// multi-table forms on MySQL, FROM/USING joins, read-only CTEs, subqueries,
// aggregates, GROUP BY, HAVING, DISTINCT, window functions, set operations
// in subqueries) with {{fence}} as a top-level conjunct of its WHERE,
// spelled the hostile ways: keywords as column and alias names (bare,
// qualified, quoted), bytes 0x00-0x20 and 0x7F-0xFF as space and after --,
// numbers glued to words, every comment and quoting form of the dialect,
// and, in about half the statements, a top-level OR (or a second statement)
// smuggled in one of those ways. Plain statements are the control: the
// checker must refuse a visible OR, and the oracle counts how many accepted
// statements really write for the holder.
func (sc *Schema) Generate(seed, index uint64) *Stmt {
	g := &gen{
		sc: sc,
		d:  sc.Dialect,
		r:  rand.New(rand.NewPCG(seed, index)),
		st: &Stmt{Seed: seed, Index: index},
	}
	g.st.Session = g.session()
	g.pSep = []float64{0, 0, 0.02, 0.05, 0.12}[g.r.IntN(5)]
	g.pCase = []float64{0, 0.2, 0.6}[g.r.IntN(3)]
	g.pKw = []float64{0.1, 0.4, 0.8}[g.r.IntN(3)]
	g.pHost = []float64{0.1, 0.3, 0.6}[g.r.IntN(3)]
	switch k := g.r.IntN(100); {
	case k < 30:
		g.update()
	case k < 48:
		g.delete()
	default:
		g.insert()
	}
	g.tail()
	return g.st
}

type gen struct {
	sc    *Schema
	d     fence.Dialect
	r     *rand.Rand
	st    *Stmt
	stack []int
	// This statement's chances of a hostile separator, of a keyword in
	// mixed case, of a keyword column where a column is named, and of a
	// hostile literal or number.
	pSep, pCase, pKw, pHost float64
	ansi                    bool // MySQL session with ANSI_QUOTES: "…" is a name
	// A read-only CTE in scope: its name and column ("" for none).
	cte, cteCol string
	// Subqueries must not read Items, the statement's target (MariaDB
	// refuses that in a multi-table UPDATE or DELETE).
	noSelf bool
}

// scope is a row source the conditions can name: its qualifier (an alias
// or the table name, as spelled, with the piece it follows), and whether
// unqualified names would be ambiguous (a join).
type scope struct {
	rows         bool
	q            int // 1 + index of the piece spelling the qualifier; 0: fixed qText
	qText, qPlan string
	mustQualify  bool
}

func (g *gen) coin(p float64) bool     { return g.r.Float64() < p }
func (g *gen) one(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g *gen) add(p Piece) int {
	p.groups = append([]int(nil), g.stack...)
	g.st.Pieces = append(g.st.Pieces, p)
	return len(g.st.Pieces) - 1
}

func (g *gen) fix(s string) { g.add(Piece{Text: s, Plain: s}) }

// host adds a hostile spelling text of what plain says plainly.
func (g *gen) host(class, text, plain string) int {
	if text == plain {
		class = ""
	}
	return g.add(Piece{Text: text, Plain: plain, Class: class})
}

// open starts a group of pieces that minimising may remove together.
func (g *gen) open() int {
	g.st.NGroups++
	g.stack = append(g.stack, g.st.NGroups)
	return g.st.NGroups
}

// enter adds the next pieces to an existing group as well.
func (g *gen) enter(id int) { g.stack = append(g.stack, id) }
func (g *gen) close()       { g.stack = g.stack[:len(g.stack)-1] }

// k adds a keyword, in mixed case now and then (servers fold keywords).
func (g *gen) k(w string) {
	if !g.coin(g.pCase) {
		g.fix(w)
		return
	}
	g.host("case", mixCase(g.r, w), w)
}

func mixCase(r *rand.Rand, w string) string {
	b := []byte(w)
	for i, c := range b {
		if r.IntN(2) == 0 {
			if c >= 'a' && c <= 'z' {
				b[i] = c - 32
			} else if c >= 'A' && c <= 'Z' {
				b[i] = c + 32
			}
		}
	}
	return string(b)
}

// ks adds words separated by sp: upper-case words are keywords.
func (g *gen) ks(ws ...string) {
	for i, w := range ws {
		if i > 0 {
			g.sp()
		}
		if w == strings.ToUpper(w) && w != strings.ToLower(w) && !strings.ContainsAny(w, "'\"`.(") {
			g.k(w)
		} else {
			g.fix(w)
		}
	}
}

// sp adds a separator: a space, or now and then a hostile one.
func (g *gen) sp() {
	if !g.coin(g.pSep) {
		g.fix(" ")
		return
	}
	g.hostileSep("")
}

// A byte that might be taken for space: C0 controls, space, DEL and the
// high bytes (Latin-1's NBSP, lead and continuation bytes of UTF-8 and of
// the Asian multibyte sets).
func (g *gen) spaceByte() byte {
	switch r := g.r.IntN(20); {
	case r < 6:
		return " \t\n\r\f\v"[g.r.IntN(6)]
	case r < 13:
		return byte(g.r.IntN(0x21))
	case r < 15:
		return 0x7f // DEL: a control character to some lexers, not to others
	case r < 17:
		return byte(0x80 + g.r.IntN(0x20)) // C1 controls in Latin-1
	default:
		return byte(0xa0 + g.r.IntN(0x60))
	}
}

// Exotic spaces in UTF-8 that some lexer might count as whitespace.
var unicodeSpaces = []string{"\u00a0", "\u2028", "\u2029", "\u3000", "\ufeff", "\u0085", "\u200b"}

// hostileSep adds one hostile separator; payload, if not empty, is SQL
// that it hides from one reader and shows to another (after a comment
// terminator that only some lexers honour).
func (g *gen) hostileSep(payload string) {
	switch g.r.IntN(10) {
	case 0, 1, 2: // a run of space-like bytes
		var b strings.Builder
		b.WriteByte(' ')
		for n := 1 + g.r.IntN(3); n > 0; n-- {
			if g.coin(0.15) {
				b.WriteString(unicodeSpaces[g.r.IntN(len(unicodeSpaces))])
			} else {
				b.WriteByte(g.spaceByte())
			}
		}
		b.WriteString(payload)
		if payload != "" {
			b.WriteByte(' ')
		}
		g.host("space-bytes", b.String(), " ")
	case 3, 4, 5, 6: // -- line comment
		g.host("line-comment", " "+g.lineComment("--", payload), " ")
	case 7: // # line comment (MySQL; an operator on PostgreSQL)
		g.host("hash-comment", " "+g.lineComment("#", payload), " ")
	default:
		g.host("block-comment", " "+g.blockComment(payload), " ")
	}
}

// Line terminators, or not: a lexer may end a -- comment at any of them,
// or run on to the next \n ("" leaves it unterminated).
var terms = []string{"\n", "\r", "\r\n", "\f", "\v", "\x00", "\x85", "\u2028", "\u0085", "\x1a", ""}

// lineComment returns a comment opened by open: open, a byte right after it
// (which decides on MySQL whether it is a comment at all), some text, a
// terminator, then payload, which is SQL to a reader that ended the comment
// at the terminator and comment text to one that did not.
func (g *gen) lineComment(open, payload string) string {
	var b strings.Builder
	b.WriteString(open)
	switch g.r.IntN(6) {
	case 0:
	case 1:
		b.WriteByte(' ')
	case 2:
		b.WriteString("-")
	default:
		b.WriteByte(g.spaceByte())
	}
	b.WriteString(g.one("", " x", " '", ` "`, " /*", " ?", " $$", " {{fence}}", " `", " ;"))
	term := terms[g.r.IntN(len(terms))]
	if payload == "" && g.coin(0.3) {
		payload = g.payload()
	}
	b.WriteString(term)
	b.WriteString(payload)
	switch {
	case term == "\n" || term == "\r\n":
	case term == "" && payload == "" && g.coin(0.5):
		// Unterminated: to a reader that takes it for a comment it runs
		// to the next newline, perhaps over the marker.
	default:
		b.WriteString("\n")
	}
	return b.String()
}

func (g *gen) blockComment(payload string) string {
	if payload == "" && g.coin(0.3) {
		payload = g.payload()
	}
	open := g.one("/*", "/*", "/**", "/*!", "/*!50000", "/*!99999", "/*M!", "/*M!100000", "/*+", "/*/")
	switch g.r.IntN(4) {
	case 0: // nested: PostgreSQL nests block comments, the others do not
		return "/* /* */" + payload + " */"
	case 1:
		return open + " x " + payload + " */"
	default:
		return open + payload + " " + g.one("*/", "**/", "*/", "*/*/")
	}
}

// payload is SQL smuggled inside a comment or literal: a top-level OR, or a
// second statement.
func (g *gen) payload() string {
	switch g.r.IntN(6) {
	case 0:
		return "; DELETE FROM " + g.sc.Items
	case 1:
		return "; UPDATE " + g.sc.Items + " SET val = 'second'"
	case 2:
		return "; INSERT INTO " + g.sc.Sink + " (id, val, n) VALUES (99, 'second', 0)"
	default:
		return " " + g.one("OR", "or", "Or") + " " + g.one("1=1", "1 = 1", "TRUE", "1")
	}
}

// session picks the handle and session settings: the connection's own half
// of the time.
func (g *gen) session() Session {
	h := 0
	if len(g.sc.Options) > 1 && g.coin(0.5) {
		h = 1
	}
	s := Session{Handle: h}
	if h >= len(g.sc.Options) {
		return s
	}
	opts := g.sc.Options[h]
	change := g.coin(0.5)
	for _, name := range sortedKeys(opts) {
		vals := opts[name]
		v := vals[0]
		if change && len(vals) > 1 && g.coin(0.6) {
			v = vals[1+g.r.IntN(len(vals)-1)]
		}
		s.Settings = append(s.Settings, Setting{name, v})
		if g.d == fence.MySQL && name == "sql_mode" {
			for _, m := range strings.Split(v, ",") {
				switch m {
				case "ANSI_QUOTES", "ANSI", "ORACLE", "MSSQL", "POSTGRESQL", "DB2", "MAXDB":
					g.ansi = true
				}
			}
		}
	}
	return s
}

// tableName adds a table name, bare or quoted, and returns the piece.
func (g *gen) tableName(t string) int {
	if g.coin(g.pHost / 2) {
		q := []string{quoteIdent(g.d, t)}
		switch g.d {
		case fence.SQLite:
			q = append(q, "["+t+"]", "`"+t+"`")
		case fence.MySQL:
			if g.ansi {
				q = append(q, `"`+t+`"`)
			}
		}
		return g.host("quoted-name", q[g.r.IntN(len(q))], t)
	}
	g.fix(t)
	return len(g.st.Pieces) - 1
}

// Words of SQL's clause structure: as column and alias names they are the
// likeliest to be read as the clause they name.
var clauseWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`OFFSET LIMIT LOCK END CASE FOR ON SET FROM USING INTO VALUES SELECT
		ORDER GROUP HAVING WINDOW FETCH RETURNING WHERE WITH AND OR XOR NOT BETWEEN UNION INTERSECT
		EXCEPT MINUS UPDATE DELETE INSERT REPLACE MERGE DO KEY DISTINCT IS TABLE WHEN THEN ELSE BEGIN
		ROWS ONLY FIRST NEXT SHARE NOWAIT SKIP LOCKED DUPLICATE CONFLICT IGNORE OVER PARTITION
		RECURSIVE LATERAL JOIN NATURAL CROSS INNER LEFT OUTER USE FORCE INDEX STRAIGHT_JOIN DIV MOD
		LIKE REGEXP RLIKE ESCAPE COLLATE BINARY INTERVAL EXISTS ANY ALL SOME IN NULL TRUE FALSE
		UNKNOWN DUAL LIMITED ROW NOTHING EXCLUDED CURRENT TIES PERCENT`) {
		clauseWords[w] = true
	}
}

// kwcol picks a keyword column for which ok holds, favouring clause words;
// with a small chance any column (a spelling the server may refuse).
func (g *gen) kwcol(ok func(Column) bool) (Column, bool) {
	cols := g.sc.Cols
	if len(cols) == 0 {
		return Column{}, false
	}
	any := g.coin(0.05)
	for try := 0; try < 40; try++ {
		c := cols[g.r.IntN(len(cols))]
		if try < 20 && g.coin(0.5) && !clauseWords[strings.ToUpper(c.Name)] {
			continue
		}
		if any || ok(c) {
			return c, true
		}
	}
	return Column{}, false
}

// quotedCol spells a keyword column quoted, in a way of the dialect.
func (g *gen) quotedCol(name string) string {
	switch g.d {
	case fence.SQLite:
		return g.one(`"`+name+`"`, "["+name+"]", "`"+name+"`")
	case fence.MySQL:
		if g.ansi && g.coin(0.5) {
			return `"` + name + `"`
		}
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// bareName is a keyword as an unquoted name, in any case (servers fold
// unquoted names).
func (g *gen) bareName(name string) string {
	if g.coin(0.5) {
		return mixCase(g.r, name)
	}
	return name
}

// qual adds the scope's qualifier.
func (g *gen) qual(sc scope) {
	if sc.q > 0 {
		g.add(Piece{Text: sc.qText, Plain: sc.qPlan, Link: sc.q})
		return
	}
	g.fix(sc.qText)
}

// col adds a reference to base column name (id, val or n) of sc.
func (g *gen) col(sc scope, name string) {
	if sc.mustQualify || sc.qText != "" && g.coin(0.4) {
		g.qual(sc)
		g.fix(".")
	}
	g.fix(name)
}

// kwref adds a reference to a keyword column of sc, or to n.
func (g *gen) kwref(sc scope) {
	if !sc.rows {
		g.num()
		return
	}
	switch r := g.r.IntN(3); {
	case r == 0 && !sc.mustQualify:
		if c, ok := g.kwcol(func(c Column) bool { return c.Bare }); ok {
			g.host("kw-col", g.bareName(c.Name), "n")
			return
		}
	case r == 1 && sc.qText != "":
		if c, ok := g.kwcol(func(c Column) bool { return c.Qualified }); ok {
			g.qual(sc)
			g.fix(".")
			g.host("kw-col", g.bareName(c.Name), "n")
			return
		}
	}
	if c, ok := g.kwcol(func(Column) bool { return true }); ok {
		if sc.mustQualify || sc.qText != "" && g.coin(0.3) {
			g.qual(sc)
			g.fix(".")
		}
		g.host("kw-col", g.quotedCol(c.Name), "n")
		return
	}
	g.col(sc, "n")
}

// nref is n or, with the statement's chance, a keyword column.
func (g *gen) nref(sc scope) {
	if !sc.rows {
		g.num()
		return
	}
	if g.coin(g.pKw) {
		g.kwref(sc)
		return
	}
	g.col(sc, "n")
}

func (g *gen) idref(sc scope) {
	if !sc.rows {
		g.num()
		return
	}
	g.col(sc, "id")
}

func (g *gen) valref(sc scope) {
	if !sc.rows {
		g.fix("'v1'")
		return
	}
	g.col(sc, "val")
}

// num adds a small number, now and then spelled oddly.
func (g *gen) num() {
	plain := g.one("1", "2", "3")
	if !g.coin(g.pHost) {
		g.fix(plain)
		return
	}
	if g.coin(0.2) {
		// Spellings some server reads as a number, another as a name or
		// an error.
		g.host("number", g.one("0x1", "0X1", "0b1", "0o1", "1_0", "1d", "1f", "1e", "1..", "0x", "1$", "1ee1", "1e1e1"), plain)
		return
	}
	g.host("number", g.one("1.0", "1.", ".5e1", "1e0", "1E+0", "1e-0", "01", "+1", "- -1", "(1)", "1.0e0", "0.1e1", "1.e1", "10e-1"), plain)
}

// Glued numbers: a lexer that reads the number and the word after it as
// one token hides the word from the checker.
var gluedNums = []string{"1", "1.0", "1.", ".5", "1e1", "1E1", "1e+1", "1e-1", "0x1", "0X1", "0b1", "0o1", "1_0", "00", "0.0e0"}

// A high byte for the first byte of a two-byte character whose second
// byte may be a backslash (GBK, Big5, Shift-JIS, CP932).
//
// Half the time it is valid UTF-8 instead: a character whose last byte is
// such a lead byte once the bytes before it pair up in the multibyte set
// (中 is E4 B8 AD: GBK and Big5 read E4 B8, then AD with what follows;
// 文 is E6 96 87: Shift-JIS reads E6 96, then 87 with what follows), for a
// checker that only refuses text that is not UTF-8.
func (g *gen) leadByte() string {
	if g.coin(0.5) {
		return g.one("中", "文", "表", "ソ", "€", "中中中", "¬中", "é文")
	}
	return string([]byte{byte(0x81 + g.r.IntN(0x7e))})
}

// lit adds a string literal compared with val: 'x', or now and then a
// hostile spelling of the dialect.
func (g *gen) lit() {
	if !g.coin(g.pHost) {
		g.fix(g.one("'x'", "'v1'", "'init'"))
		return
	}
	var forms []string
	common := []string{`'it''s'`, `''`, `'--'`, `'/*'`, `'*/'`, `'?'`, `';'`, `'{{fence}}'`, `'#'`, `'"'`, "'`'",
		`'$$'`, "'\n'", "'\r'", `'\'`, `'\\'`, `'a\''`, `'\' OR 1=1 -- '`, `'\\' OR 1=1 -- '`}
	switch g.d {
	case fence.Postgres:
		forms = []string{`E'x'`, `e'\''`, `E'\\'`, `E'\' OR 1=1 -- '`, `U&'\0041'`, `u&'d!0061t' UESCAPE '!'`,
			`U&'\' OR 1=1 -- '`, `$$x$$`, `$$ ' $$`, `$a$ $$ ' $a$`, `$a$x$a$`, `$_$x$_$`, `N'x'`, "'a'\n'b'",
			"'a' -- c\n'b'", `X'41'`, "E'" + g.leadByte() + `\' OR 1=1 -- '`, "'" + g.leadByte() + "'",
			"$a$ $a$ OR 1=1 -- $a$", "$$\\$$", "e'\\\\' OR 1=1 -- '"}
	case fence.MySQL:
		forms = []string{`"x"`, `_utf8mb4'x'`, `_latin1'x'`, `_binary'x'`, `N'x'`, `n'x'`, `x'41'`, `X'41'`,
			`0x41`, `b'01000001'`, `0b01000001`, `'a' 'b'`, `'a' "b"`, `'\%'`, `"it\"s"`, `'\Z'`,
			"'" + g.leadByte() + `\\'`, "'" + g.leadByte() + `\' OR 1=1 -- '`, `"\" OR 1=1 -- "`,
			`_gbk'x'`, "_gbk'" + g.leadByte() + `\\'`, `'a'/* */'b'`, "'a'\n'b'"}
	case fence.SQLite:
		forms = []string{`"x"`, `x'41'`, `X''`, `'a''b'`, `'\' OR 1=1 -- '`, "'\x00'"}
	}
	forms = append(forms, common...)
	if g.coin(0.3) {
		g.host("literal", g.randomLiteral(), "'x'")
		return
	}
	g.host("literal", forms[g.r.IntN(len(forms))], "'x'")
}

// randomLiteral is a quote, a few pieces that lexers read differently
// inside literals, and a quote.
func (g *gen) randomLiteral() string {
	prefix := ""
	switch g.d {
	case fence.Postgres:
		prefix = g.one("", "", "E", "e", "N", "U&")
	case fence.MySQL:
		prefix = g.one("", "", "N", "_utf8mb4", "_gbk", "_binary")
	}
	parts := []string{"a", " ", "''", `\`, `\\`, `\'`, `"`, "`", "?", ";", "--", "/*", "*/", "#", "$", "$$",
		"{{fence}}", "\n", "\r", " OR 1=1 -- ", "\x00", "\x1a", "%", "_"}
	var b strings.Builder
	b.WriteString(prefix + "'")
	for n := 1 + g.r.IntN(5); n > 0; n-- {
		if g.coin(0.15) {
			b.WriteString(g.leadByte())
			continue
		}
		b.WriteString(parts[g.r.IntN(len(parts))])
	}
	b.WriteString("'")
	return b.String()
}

// and adds AND, or a spelling of it.
func (g *gen) and() {
	if g.d == fence.MySQL && g.coin(g.pHost/4) {
		g.host("and-op", "&&", "AND")
		return
	}
	g.k("AND")
}

// orWord is OR, or a spelling of it that some readers take for OR.
func (g *gen) orWord() string {
	if g.d == fence.MySQL && g.coin(0.3) {
		return g.one("||", "XOR", "xor")
	}
	return mixCase(g.r, "OR")
}

// trueCond is a condition true on every row.
func (g *gen) trueCond(sc scope) string {
	if sc.rows && !sc.mustQualify && g.coin(0.3) {
		return "id > 0"
	}
	return g.one("1=1", "1 = 1", "TRUE", "1")
}

// cmpOp is a comparison operator of the dialect.
func (g *gen) cmpOp() string {
	ops := []string{"=", "<>", "!=", ">", ">=", "<", "<="}
	switch g.d {
	case fence.MySQL:
		ops = append(ops, "<=>")
	case fence.Postgres:
		ops = append(ops, "IS NOT DISTINCT FROM", "IS DISTINCT FROM")
	case fence.SQLite:
		ops = append(ops, "IS", "IS NOT", "==", "IS NOT DISTINCT FROM")
	}
	return ops[g.r.IntN(len(ops))]
}

// cond adds one condition (a conjunct of a WHERE, or an operand inside
// parentheses).
func (g *gen) cond(sc scope, depth int) {
	n := 14
	if depth >= 2 {
		n = 6
	}
	switch g.r.IntN(n) {
	case 0:
		g.idref(sc)
		g.sp()
		g.ks(g.cmpOp())
		g.sp()
		g.num()
	case 1:
		g.idref(sc)
		g.sp()
		if g.coin(0.3) {
			g.k("NOT")
			g.sp()
		}
		g.k("IN")
		g.sp()
		g.fix("(")
		g.num()
		g.fix(", ")
		g.num()
		g.fix(")")
	case 2:
		g.nref(sc)
		g.sp()
		g.ks("BETWEEN")
		g.sp()
		g.num()
		g.sp()
		g.k("AND")
		g.sp()
		g.fix("9")
	case 3, 4:
		g.kwref(sc)
		g.sp()
		switch g.r.IntN(4) {
		case 0:
			g.ks("IS", "NOT", "NULL")
		case 1:
			g.fix(">")
			g.sp()
			g.fix("0")
		case 2:
			g.fix("=")
			g.sp()
			g.idref(sc)
		default:
			g.ks("BETWEEN", "0")
			g.sp()
			g.k("AND")
			g.sp()
			g.fix("9")
		}
	case 5:
		g.valref(sc)
		g.sp()
		if g.coin(0.3) {
			g.k("LIKE")
		} else {
			g.fix(g.one("<>", "=", "<>", ">="))
		}
		g.sp()
		g.lit()
	case 6:
		g.fix("(")
		g.cond(sc, depth+1)
		g.sp()
		g.host("paren-or", g.orWord(), "OR")
		g.sp()
		g.cond(sc, depth+1)
		g.fix(")")
	case 7:
		g.k("NOT")
		g.sp()
		g.fix("(")
		g.cond(sc, depth+1)
		g.fix(")")
	case 8, 9:
		g.subquery(sc)
	case 10:
		g.k("CASE")
		g.sp()
		if g.coin(0.3) {
			g.nref(sc)
			g.sp()
			g.ks("WHEN", "1", "THEN", "1", "ELSE", "1")
		} else {
			g.k("WHEN")
			g.sp()
			g.cond(sc, depth+1)
			g.sp()
			g.ks("THEN", "1", "ELSE", "0")
		}
		g.sp()
		g.k("END")
		g.sp()
		g.fix("= 1")
	case 11:
		g.arith(sc)
	case 12:
		g.fix("{{now_ms}} > 0")
	default:
		switch g.r.IntN(3) {
		case 0:
			g.idref(sc)
			g.fix(" > ")
			g.add(Piece{Text: "?", Plain: "?", Args: []any{0}, PlainArgs: []any{0}})
		case 1:
			g.valref(sc)
			g.sp()
			g.ks("IS", "NOT", "NULL")
		default:
			g.fix(g.one("1 = 1", "TRUE", "2 > 1"))
		}
	}
}

// arith adds a true condition with arithmetic or string operators.
func (g *gen) arith(sc scope) {
	switch g.r.IntN(6) {
	case 0:
		g.nref(sc)
		g.fix(" + 0 >= ")
		g.nref(sc)
	case 1:
		if g.d == fence.MySQL {
			g.fix("CONCAT(")
			g.valref(sc)
			g.fix(", 'x') <> 'y'")
		} else {
			g.valref(sc)
			g.sp()
			g.fix("||")
			g.sp()
			g.fix("'x' <> 'y'")
		}
	case 2:
		g.nref(sc)
		g.sp()
		switch g.d {
		case fence.MySQL:
			g.ks(g.one("DIV", "MOD", "%"))
		case fence.Postgres:
			g.fix(g.one("%", "#", "&", "|"))
		default:
			g.fix(g.one("%", "&", "|"))
		}
		g.sp()
		g.fix("1 >= 0")
	case 3:
		if g.d == fence.Postgres {
			g.nref(sc)
			g.fix("::int >= 0")
			return
		}
		g.fix("CAST(")
		g.nref(sc)
		g.fix(" AS INT) >= 0")
	case 4:
		// || is OR on MySQL unless PIPES_AS_CONCAT: the checker must refuse it.
		if g.d == fence.MySQL {
			g.valref(sc)
			g.fix(" || 'x' <> 'y'")
			return
		}
		g.fix("COALESCE(")
		g.nref(sc)
		g.fix(", 0) >= 0")
	default:
		g.fix("-")
		g.nref(sc)
		g.fix(" <= 0")
	}
}

// subquery adds a condition with a subquery of one of the read-only
// shapes: EXISTS, IN with set operations, aggregates, window functions,
// LIMIT/OFFSET, a CTE.
func (g *gen) subquery(sc scope) {
	t := g.sc.Items
	if g.noSelf {
		t = g.sc.Sink
	}
	inner := scope{rows: true, qText: "s", qPlan: "s"}
	switch g.r.IntN(10) {
	case 0:
		g.ks("EXISTS")
		g.sp()
		g.fix("(")
		g.ks("SELECT", "1", "FROM", t, "AS", "s", "WHERE")
		g.sp()
		g.fix("s.id = ")
		g.idref(sc)
		g.fix(")")
	case 1:
		g.idref(sc)
		g.sp()
		g.ks("IN")
		g.sp()
		g.fix("(")
		g.ks("SELECT", "id", "FROM", t)
		g.sp()
		g.ks(g.one("UNION", "UNION ALL", "INTERSECT", "EXCEPT", "UNION DISTINCT"))
		g.sp()
		g.k("SELECT")
		g.sp()
		g.num()
		if g.d == fence.MySQL {
			g.fix(" FROM DUAL")
		}
		g.fix(")")
	case 2:
		g.idref(sc)
		g.fix(" IN (")
		g.ks("SELECT", "MAX(id)", "FROM", t, "GROUP", "BY", "n", "HAVING", "COUNT(*) >= 1")
		g.fix(")")
	case 3:
		g.idref(sc)
		g.fix(" >= (")
		g.ks("SELECT", "MIN(id)", "FROM", t)
		g.fix(")")
	case 4:
		g.idref(sc)
		g.fix(" IN (")
		g.ks("SELECT", "id", "FROM", "(SELECT", "id,", "ROW_NUMBER()", "OVER", "(ORDER", "BY", "id)", "AS", "rn", "FROM", t+")", "AS", "w", "WHERE", "rn <= 3")
		g.fix(")")
	case 5:
		g.idref(sc)
		g.fix(" IN (")
		g.ks("SELECT", "x", "FROM", "(SELECT", "id", "AS", "x", "FROM", t, "ORDER", "BY", "id", "LIMIT", "3", "OFFSET", "1)", "AS", "l")
		g.fix(")")
	case 6:
		g.k("EXISTS")
		g.fix(" (")
		g.ks("SELECT", "1", "FROM", t, "AS", "s", "WHERE")
		g.sp()
		g.kwref(inner)
		g.fix(" IS NOT NULL)")
	case 7:
		g.idref(sc)
		g.fix(" IN (")
		g.ks("WITH", "c", "AS", "(SELECT", "id", "FROM", t+")", "SELECT", "id", "FROM", "c")
		g.fix(")")
	case 8:
		g.idref(sc)
		g.fix(" IN (")
		g.ks("SELECT", "DISTINCT", "n", "FROM", t)
		if g.d != fence.SQLite && g.coin(0.5) {
			g.sp()
			g.ks("FOR", "UPDATE")
		}
		g.fix(")")
	default:
		if g.cte != "" {
			g.idref(sc)
			g.fix(" IN (SELECT " + g.cteCol + " FROM " + g.cte + ")")
			return
		}
		g.idref(sc)
		g.fix(" IN (")
		g.ks("SELECT", "s.id", "FROM", t, "AS", "s", "WHERE")
		g.sp()
		g.cond(inner, 2)
		g.fix(")")
	}
}

// rowSource adds table t with an alias, maybe a keyword one, and returns
// the scope naming it. noAlias leaves the alias out (MariaDB's single-table
// DELETE takes none).
func (g *gen) rowSource(t, alias string, join, noAlias bool) scope {
	tp := g.tableName(t)
	sc := scope{rows: true, mustQualify: join}
	if g.r.IntN(10) < 3 && !join || noAlias {
		sc.q, sc.qText, sc.qPlan = tp+1, g.st.Pieces[tp].Text, t
		return sc
	}
	spell := g.aliasSpelling(alias)
	g.sp()
	if g.coin(0.8) {
		g.ks("AS")
		g.sp()
	}
	p := g.host("kw-alias", spell, alias)
	sc.q, sc.qText, sc.qPlan = p+1, spell, alias
	return sc
}

// where adds WHERE with {{fence}} among 0-3 other conjuncts, and in about
// half the statements one more conjunct with something smuggled in: a
// top-level OR (plainly, which the checker must refuse, or hidden one of
// the hostile ways), a second statement, or, before the marker, the start
// of a comment or literal that some reader runs on over the marker. join,
// if set, adds a join condition first.
func (g *gen) where(sc scope, join func()) {
	g.k("WHERE")
	g.sp()
	if join != nil {
		join()
		g.sp()
		g.and()
		g.sp()
	}
	n := g.r.IntN(4)
	m := g.r.IntN(n + 1)
	smug, swallow := -1, false
	if g.coin(0.6) {
		smug = g.r.IntN(n + 1)
		swallow = smug < m && g.coin(0.2)
	}
	closeLit := false
	for i := 0; i <= n; i++ {
		if i == m {
			g.fix("{{fence}}")
			if swallow {
				// Ends a line comment the smuggler left open before the
				// marker, for a reader that took it for one.
				g.host("swallow-end", "\n", " ")
			}
		} else {
			g.open()
			if i > m {
				g.sp()
				g.and()
				g.sp()
			}
			g.cond(sc, 0)
			if i < m {
				g.sp()
				g.and()
				g.sp()
			}
			g.close()
		}
		if i != smug {
			continue
		}
		// One more conjunct, after item i.
		g.open()
		if i >= m {
			g.sp()
			g.and()
			g.sp()
		}
		if swallow {
			closeLit = g.swallow(sc)
		} else {
			g.smuggle(sc)
		}
		if i < m {
			g.sp()
			g.and()
			g.sp()
		}
		g.close()
	}
	if closeLit {
		// The end of the swallowing literal: to fence a literal of its
		// own; to a reader that ran the first one on to here, the quote
		// that ends it, then an OR (with three ? in place of the guard's,
		// which it swallowed, so that the placeholders still add up).
		g.open()
		g.sp()
		g.and()
		g.sp()
		g.valref(sc)
		g.fix(" <> ")
		// With a ) first, for a fence that parenthesises the caller's
		// condition.
		g.host("swallow", g.one(`' OR 1=1 -- '`, `' OR 1=1 OR ? OR ? OR ? -- '`, `' OR ? - ? - ? OR 1=1 -- '`,
			`') OR 1=1 -- '`, `') OR 1=1 OR ? OR ? OR ? -- '`), "'x'")
		g.host("swallow-end", "\n", "")
		g.close()
	}
}

// smuggle adds a condition that carries an OR making the WHERE true on
// every row, or a second statement, written one of the ways some reader
// does not see.
func (g *gen) smuggle(sc scope) {
	switch g.r.IntN(9) {
	case 0: // plainly: the control
		g.idref(sc)
		g.fix(" > 0")
		g.sp()
		g.host("smuggled-or", g.orWord(), "AND")
		g.sp()
		g.fix(g.trueCond(sc))
	case 1: // a number glued to OR
		g.idref(sc)
		g.fix(" > ")
		g.host("glued-number", gluedNums[g.r.IntN(len(gluedNums))]+g.one("OR", "or", "XOR", "Or", "AND")+" "+g.trueCond(sc), "0")
	case 2: // a keyword column, then OR
		g.kwref(sc)
		g.fix(g.one(" IS NOT NULL", " > 0", " >= 0"))
		g.sp()
		g.host("smuggled-or", g.orWord(), "AND")
		g.sp()
		g.fix(g.trueCond(sc))
	case 3: // a CASE with a keyword column in it, then OR
		g.k("CASE")
		g.fix(" ")
		g.k("WHEN")
		g.fix(" ")
		g.kwref(sc)
		g.fix(" > 0 ")
		g.ks("THEN", "1", "ELSE", "1")
		g.fix(" ")
		g.k("END")
		g.fix(" = 1")
		g.sp()
		g.host("smuggled-or", g.orWord(), "AND")
		g.sp()
		g.fix(g.trueCond(sc))
	case 4, 5: // in a line comment some reader ends early
		g.fix("1=1")
		g.host("comment-exposed", " "+g.lineComment(g.one("--", "--", "#"), " "+g.orWord()+" "+g.trueCond(sc)), " ")
	case 6: // in a block comment
		g.fix("1=1")
		g.host("comment-exposed", " "+g.blockComment(" "+g.orWord()+" "+g.trueCond(sc))+" ", " ")
	case 7: // in a literal some reader ends early
		g.valref(sc)
		g.fix(" <> ")
		g.host("literal-exposed", g.exposingLiteral(), "'x'")
	default: // a second statement, in a comment or a literal
		if g.coin(0.5) {
			g.fix("1=1")
			g.host("second-statement", " "+g.lineComment("--", g.secondStatement()), " ")
			return
		}
		g.valref(sc)
		g.fix(" <> ")
		q := strings.Replace(g.exposingLiteral(), "OR 1=1", g.secondStatement(), 1)
		g.host("second-statement", q, "'x'")
	}
}

func (g *gen) secondStatement() string {
	switch g.r.IntN(3) {
	case 0:
		return "; DELETE FROM " + g.sc.Items
	case 1:
		return "; UPDATE " + g.sc.Items + " SET val = 'second'"
	default:
		return "; INSERT INTO " + g.sc.Sink + " (id, val, n) VALUES (99, 'second', 0)"
	}
}

// exposingLiteral is a literal that some reader ends before " OR 1=1 -- '".
func (g *gen) exposingLiteral() string {
	if g.coin(0.4) {
		// The same, closing a parenthesis first: fence may have put the
		// caller's condition in parentheses.
		return strings.Replace(g.exposingLiteral1(), "' OR 1=1 -- '", "') OR 1=1 -- '", 1)
	}
	return g.exposingLiteral1()
}

func (g *gen) exposingLiteral1() string {
	switch g.d {
	case fence.Postgres:
		if g.coin(0.4) {
			return "E'" + g.leadByte() + `\' OR 1=1 -- '`
		}
		return g.one(`'\' OR 1=1 -- '`, `E'\' OR 1=1 -- '`, "E'"+g.leadByte()+`\' OR 1=1 -- '`,
			`U&'\' OR 1=1 -- '`, "$a$ $a$ OR 1=1 -- $a$", "'a'\n' OR 1=1 -- '", `e'\\\' OR 1=1 -- '`)
	case fence.MySQL:
		if g.coin(0.4) {
			return "'" + g.leadByte() + `\' OR 1=1 -- '`
		}
		return g.one(`'\' OR 1=1 -- '`, `"\" OR 1=1 -- "`, "'"+g.leadByte()+`\' OR 1=1 -- '`,
			`'\\\' OR 1=1 -- '`, "_gbk'"+g.leadByte()+`\' OR 1=1 -- '`, `'\'' OR 1=1 -- '`)
	}
	return g.one(`'\' OR 1=1 -- '`, `'' OR 1=1 -- '`, "'\x00' OR 1=1 -- '")
}

// swallow adds, before the marker, a condition that ends in something some
// reader takes for the start of a comment or literal that runs over the
// marker (the guard then vanishes for it). It reports whether a literal
// was opened that where must close after the marker.
func (g *gen) swallow(sc scope) bool {
	switch g.r.IntN(4) {
	case 0, 1: // a line comment left open: the marker's line ends with \n
		var b strings.Builder
		b.WriteString(" " + g.one("--", "--", "#"))
		if g.coin(0.5) {
			b.WriteByte(g.spaceByte())
		} else {
			// A control character: a comment to one lexer, not to another.
			b.WriteByte([]byte{0x7f, 0x7f, 0x01, 0x08, 0x0e, 0x1a, 0x1b, 0x1f}[g.r.IntN(8)])
		}
		b.WriteString(g.one("", " x", " -"))
		g.fix("1=1")
		g.host("swallow", b.String(), " ")
		return false
	case 2: // a NUL: a reader of C strings stops there
		g.fix("1=1")
		g.host("swallow", g.one(" \x00 ", " -- \x00 ", " /* \x00 */ "), " ")
		return false
	default: // a literal that a multibyte reader does not end
		g.valref(sc)
		g.fix(" <> ")
		lead := g.leadByte()
		if g.d == fence.Postgres {
			g.host("swallow", "E'"+lead+`\\'`, "'x'")
		} else {
			g.host("swallow", "'"+lead+`\\'`, "'x'")
		}
		return true
	}
}

// with adds a read-only CTE (g.cte).
func (g *gen) with() {
	g.open()
	defer g.close()
	g.k("WITH")
	g.sp()
	if g.coin(0.3) {
		g.ks("RECURSIVE", "c", "(x)", "AS", "(SELECT", "1", "UNION", "ALL", "SELECT", "x", "+", "1", "FROM", "c", "WHERE", "x < 3)")
		g.cte, g.cteCol = "c", "x"
	} else {
		g.ks("c", "AS", "(SELECT", "id,", "val,", "n", "FROM", g.sc.Items)
		if g.coin(0.5) {
			g.sp()
			g.k("WHERE")
			g.sp()
			g.cond(scope{rows: true}, 2)
		}
		g.fix(")")
		g.cte, g.cteCol = "c", "id"
	}
	g.sp()
}

// Soup makes a statement for the boundary check: a fenced UPDATE followed
// by a random run of the fragments lexers delimit differently (quotes,
// comment openers and closers, semicolons, line ends, NUL, second
// statements). Each fragment is a hostile piece that minimising can drop.
// Whatever the soup, fence must either refuse it or send one statement
// that the server runs as one, guarded.
func (sc *Schema) Soup(seed, index uint64) *Stmt {
	g := &gen{sc: sc, d: sc.Dialect, r: rand.New(rand.NewPCG(seed, index^0x5eed)), st: &Stmt{Seed: seed, Index: index, Kind: "soup"}}
	g.st.Session = g.session()
	g.fix("UPDATE " + sc.Items + " SET val = 'b' WHERE {{fence}} AND 1 = 1")
	frags := []string{";", ";", " ", "'", "''", `"`, "`", "--", "-- ", "#", "\n", "\r", "\r\n", "/*", "*/", "/*/", "/*!", "x", "1",
		" AND 1 = 1", "\x00", `\`, "$", "$$", "$a$", "?", "(", ")", "[", "]", "E'", "N'", "U&'", "x'", "\x7f", "\x85", "\t",
		"\v", "\f", "\xc2\xa0", "\u3000", "\u2028", "'a'", " END", " BEGIN", " CREATE TRIGGER", " CASE", "{{fence}}",
		"; DELETE FROM " + sc.Items, "; INSERT INTO " + sc.Sink + " (id, val, n) VALUES (77, 'soup', 0)",
		" OR 1=1", "1.0OR 1=1", string([]byte{byte(0x81 + g.r.IntN(0x7e)), '\\'})}
	for n := 1 + g.r.IntN(10); n > 0; n-- {
		f := frags[g.r.IntN(len(frags))]
		g.host("soup", f, "")
	}
	if g.coin(0.5) {
		g.host("soup", "\n", "")
	}
	return g.st
}
