package sqloracle

import (
	"github.com/fencekit/fence"
)

// The statement kinds. Each writes Items or Sink for the holder often
// enough that the share of accepted statements that wrote tells whether the
// generator makes real writes.

func (g *gen) update() {
	g.st.Kind = "update"
	if g.d != fence.MySQL && g.coin(0.15) {
		g.with()
	}
	g.k("UPDATE")
	g.sp()
	multi := g.d == fence.MySQL && g.coin(0.2)
	from := g.d != fence.MySQL && g.coin(0.15)
	if multi || from {
		g.st.Kind = "update-join"
	}
	g.noSelf = multi
	sc := g.rowSource(g.sc.Items, "a", multi || from, false)
	if multi {
		g.sp()
		g.ks("JOIN", g.sc.Sink, "AS", "d", "ON", "d.id")
		g.fix(" = ")
		g.col(sc, "id")
	}
	g.sp()
	g.k("SET")
	g.sp()
	g.assignments(sc)
	var join func()
	if from {
		g.sp()
		g.ks("FROM", g.sc.Sink, "AS", "d")
		join = func() {
			g.fix("d.id = ")
			g.col(sc, "id")
		}
	}
	g.sp()
	g.where(sc, join)
	if !multi {
		g.returning(false)
	}
	if g.d == fence.MySQL && !multi && g.coin(0.25) {
		g.orderLimit()
	}
}

func (g *gen) delete() {
	g.st.Kind = "delete"
	if g.d != fence.MySQL && g.coin(0.15) {
		g.with()
	}
	g.k("DELETE")
	g.sp()
	if g.d == fence.MySQL && g.coin(0.2) {
		// DELETE a FROM items AS a JOIN sink AS d ON d.id = a.id WHERE …
		g.st.Kind = "delete-join"
		g.noSelf = true
		spell := g.aliasSpelling("a")
		p := g.host("kw-alias", spell, "a")
		sc := scope{rows: true, q: p + 1, qText: spell, qPlan: "a", mustQualify: true}
		g.sp()
		g.k("FROM")
		g.sp()
		g.tableName(g.sc.Items)
		g.sp()
		g.k("AS")
		g.sp()
		g.add(Piece{Text: spell, Plain: "a", Link: p + 1})
		g.sp()
		g.ks("JOIN", g.sc.Sink, "AS", "d", "ON", "d.id")
		g.fix(" = ")
		g.col(sc, "id")
		g.sp()
		g.where(sc, nil)
		return
	}
	g.k("FROM")
	g.sp()
	using := g.d == fence.Postgres && g.coin(0.15)
	sc := g.rowSource(g.sc.Items, "a", using, g.d == fence.MySQL)
	var join func()
	if using {
		g.st.Kind = "delete-join"
		g.sp()
		g.ks("USING", g.sc.Sink, "AS", "d")
		join = func() {
			g.fix("d.id = ")
			g.col(sc, "id")
		}
	}
	g.sp()
	g.where(sc, join)
	if g.d == fence.MySQL && g.coin(0.25) {
		g.orderLimit()
	}
	g.returning(true)
}

// orderLimit adds MySQL's ORDER BY … LIMIT of a single-table UPDATE or DELETE.
func (g *gen) orderLimit() {
	g.open()
	defer g.close()
	g.sp()
	g.ks("ORDER", "BY", "id", "LIMIT")
	g.sp()
	if g.coin(0.3) {
		g.add(Piece{Text: "?", Plain: "?", Args: []any{2}, PlainArgs: []any{2}})
		return
	}
	g.fix("2")
}

// returning adds RETURNING now and then, where the dialect has it for the
// statement (MariaDB: INSERT, REPLACE and DELETE).
func (g *gen) returning(insertOrDelete bool) {
	if !g.coin(0.15) || g.d == fence.MySQL && !insertOrDelete {
		return
	}
	g.open()
	defer g.close()
	g.sp()
	g.ks("RETURNING", g.one("id", "*", "id, val"))
}

func (g *gen) assignments(sc scope) {
	used := map[string]bool{}
	for i, n := 0, 1+g.r.IntN(3); i < n; i++ {
		if i > 0 {
			g.open()
			g.fix(",")
			g.sp()
		}
		g.assignment(sc, used)
		if i > 0 {
			g.close()
		}
	}
}

// target adds a SET target: qualified only on MySQL.
func (g *gen) target(sc scope) {
	if g.d == fence.MySQL && sc.qText != "" && (sc.mustQualify || g.coin(0.3)) {
		g.qual(sc)
		g.fix(".")
	}
}

func (g *gen) assignment(sc scope, used map[string]bool) {
	r := g.r.IntN(8)
	if r < 3 {
		if c, ok := g.kwcol(func(c Column) bool { return c.SetBare || g.coin(0.5) }); ok && !used[c.Name] {
			used[c.Name] = true
			g.target(sc)
			spell := g.quotedCol(c.Name)
			if c.SetBare && g.coin(0.6) {
				spell = g.bareName(c.Name)
			}
			plain := "n"
			if used["n"] {
				plain = spell // n is taken: a second n = would be refused
			}
			g.host("kw-col", spell, plain)
			used["n"] = true
			g.fix(" = ")
			g.num()
			return
		}
	}
	switch {
	case r < 6 && !used["val"]:
		used["val"] = true
		g.target(sc)
		g.fix("val = ")
		switch g.r.IntN(4) {
		case 0:
			g.add(Piece{Text: "?", Plain: "?", Args: []any{"p"}, PlainArgs: []any{"p"}})
		case 1:
			g.k("CASE")
			g.sp()
			g.k("WHEN")
			g.sp()
			g.cond(sc, 1)
			g.sp()
			g.ks("THEN", "'a'", "ELSE", "'b'", "END")
		default:
			g.lit()
		}
	case !used["n"]:
		used["n"] = true
		g.target(sc)
		g.fix("n = ")
		if g.coin(0.2) {
			g.fix("{{now_ms}} % 7")
			return
		}
		g.nref(sc)
		g.fix(" + 1")
	default:
		// Every base column is taken: one more keyword column, quoted.
		for _, c := range g.sc.Cols {
			if !used[c.Name] {
				used[c.Name] = true
				g.target(sc)
				g.fix(g.quotedCol(c.Name) + " = 7")
				return
			}
		}
	}
}

// aliasSpelling is alias, or a keyword spelled as a name.
func (g *gen) aliasSpelling(alias string) string {
	if g.coin(0.3) {
		return alias
	}
	c, ok := g.kwcol(func(c Column) bool { return c.Alias })
	if !ok {
		return alias
	}
	if g.coin(0.3) {
		return g.quotedCol(c.Name)
	}
	return g.bareName(c.Name)
}

// insert adds INSERT … SELECT, REPLACE … SELECT or an upsert into Sink,
// from Items or from nothing, through a select of one of the shapes that
// differ in how many rows they make when the WHERE matches none:
// aggregates, GROUP BY, HAVING, DISTINCT, window functions, set
// operations, CTEs.
func (g *gen) insert() {
	modes := []string{"plain", "plain", "plain", "upsert", "upsert", "replace", "ignore"}
	mode := modes[g.r.IntN(len(modes))]
	if g.d == fence.Postgres && (mode == "replace" || mode == "ignore") {
		mode = "upsert"
	}
	g.st.Kind = "insert-select"
	if mode != "plain" {
		g.st.Kind = "insert-" + mode
	}
	if g.d != fence.MySQL && g.coin(0.15) {
		g.with()
	}
	switch {
	case mode == "replace" && g.d == fence.SQLite && g.coin(0.5):
		g.ks("INSERT", "OR", "REPLACE", "INTO")
	case mode == "replace":
		g.ks("REPLACE", "INTO")
	case mode == "ignore" && g.d == fence.SQLite:
		g.ks("INSERT", "OR", "IGNORE", "INTO")
	case mode == "ignore":
		g.ks("INSERT", "IGNORE", "INTO")
	default:
		g.ks("INSERT", "INTO")
	}
	g.sp()
	g.tableName(g.sc.Sink)
	g.sp()
	g.fix("(id, val, n")
	var extras []int
	used := map[string]bool{}
	for n := g.r.IntN(3); n > 0; n-- {
		c, ok := g.kwcol(func(c Column) bool { return true })
		if !ok || used[c.Name] {
			continue
		}
		used[c.Name] = true
		extras = append(extras, g.open())
		g.fix(",")
		g.sp()
		if c.SetBare && g.coin(0.6) {
			g.host("kw-col", g.bareName(c.Name), g.quotedCol(c.Name))
		} else {
			g.fix(g.quotedCol(c.Name))
		}
		g.close()
	}
	g.fix(")")
	g.sp()
	if g.cte == "" && (g.d == fence.MySQL && g.coin(0.15) || g.d == fence.Postgres && g.coin(0.05)) {
		g.with() // INSERT INTO t (…) WITH c AS (…) SELECT …
	}
	g.selectBody(mode, extras)
	if mode == "upsert" || g.d == fence.Postgres && mode != "plain" {
		g.sp()
		g.upsert()
	}
	g.returning(true)
}

// selectBody adds the SELECT that feeds the insert.
func (g *gen) selectBody(mode string, extras []int) {
	shapes := []string{"row", "row", "row", "agg", "group", "having", "distinct", "window", "nofrom", "scalar", "union"}
	if g.d == fence.Postgres {
		shapes = append(shapes, "group-empty")
	}
	if g.cte == "c" && g.cteCol == "id" {
		shapes = append(shapes, "cte", "cte")
	}
	shape := shapes[g.r.IntN(len(shapes))]
	conflict := mode != "plain"
	g.st.Kind += "/" + shape
	plus := " + 100"
	if conflict {
		plus = ""
	}

	// The source's qualifier is spelled in FROM, after the select list
	// names it: the list's qualifiers are patched to follow it.
	sc := scope{}
	var pending []int
	var alias string
	rows := shape != "nofrom" && shape != "scalar"
	if rows {
		alias = g.aliasSpelling("a")
		if shape == "union" {
			alias = g.aliasSpelling("u")
		}
		plainAlias := "a"
		if shape == "union" {
			plainAlias = "u"
		}
		sc = scope{rows: true, q: -1, qText: alias, qPlan: plainAlias, mustQualify: g.coin(0.5)}
	}
	ref := func(name string) {
		if sc.mustQualify || g.coin(0.5) {
			pending = append(pending, g.add(Piece{Text: sc.qText, Plain: sc.qPlan}))
			g.fix(".")
		}
		g.fix(name)
	}

	g.k("SELECT")
	g.sp()
	if shape == "distinct" {
		g.k("DISTINCT")
		g.sp()
	}
	aggregate := false
	switch shape {
	case "row", "union", "cte":
		ref("id")
		g.fix(plus + ", ")
		if g.coin(0.5) {
			ref("val")
		} else {
			g.lit()
		}
		g.fix(", ")
		ref("n")
	case "agg", "having", "group-empty":
		aggregate = true
		g.fix("COALESCE(MAX(")
		ref("id")
		if conflict {
			g.fix("), 1), 'agg', COUNT(*)")
		} else {
			g.fix("), 0) + 100, 'agg', COUNT(*)")
		}
	case "group":
		aggregate = true
		g.fix("MAX(")
		ref("id")
		g.fix(")" + plus + ", MAX(")
		ref("val")
		g.fix("), COUNT(*)")
	case "distinct":
		ref("n")
		g.fix(plus + ", 'd', ")
		ref("n")
	case "window":
		g.ks("ROW_NUMBER()", "OVER", "(ORDER", "BY")
		g.fix(" ")
		ref("id")
		g.fix(")" + plus + ", ")
		ref("val")
		g.fix(", ")
		ref("n")
	case "nofrom":
		if conflict {
			g.fix("1, 'x', 1")
		} else {
			g.fix("100, 'x', 1")
		}
	case "scalar":
		g.fix("(")
		g.ks("SELECT", "MAX(id)", "FROM", g.sc.Items)
		g.fix(")" + plus + ", 's', 1")
	}
	for _, e := range extras {
		g.enter(e)
		g.fix(", ")
		switch {
		case aggregate:
			g.fix("COUNT(*)")
		case rows && g.coin(0.5):
			ref("n")
		default:
			g.fix("1")
		}
		g.close()
	}

	switch shape {
	case "nofrom", "scalar":
		if g.d == fence.MySQL {
			g.sp()
			g.ks("FROM", "DUAL")
		}
	default:
		g.sp()
		g.k("FROM")
		g.sp()
		switch shape {
		case "union":
			g.fix("(")
			g.ks("SELECT", "id,", "val,", "n", "FROM", g.sc.Items, "UNION", "ALL", "SELECT", "id", "+", "10,", "val,", "n", "FROM", g.sc.Items)
			g.fix(")")
		case "cte":
			g.fix("c")
		default:
			g.tableName(g.sc.Items)
		}
		g.sp()
		if g.coin(0.8) || shape == "union" && g.d != fence.SQLite {
			g.k("AS")
			g.sp()
		}
		p := g.host("kw-alias", alias, sc.qPlan)
		for _, i := range pending {
			g.st.Pieces[i].Link = p + 1
		}
		sc.q = p + 1
	}
	g.sp()
	g.where(sc, nil)

	switch shape {
	case "group":
		g.sp()
		g.ks("GROUP", "BY")
		g.sp()
		g.col(sc, "n")
	case "having":
		g.sp()
		g.ks("HAVING", "COUNT(*)", ">=", "0")
	case "group-empty":
		g.sp()
		g.ks("GROUP", "BY", "()")
	}
	if g.coin(0.2) {
		g.open()
		g.sp()
		g.ks("ORDER", "BY", "1")
		g.close()
	}
	g.open()
	defer g.close()
	switch r := g.r.IntN(20); {
	case r < 2:
		g.sp()
		g.ks("LIMIT", "10")
	case r < 4:
		g.sp()
		g.ks("LIMIT", "10", "OFFSET", "0")
	case r < 5 && g.d == fence.Postgres:
		g.sp()
		g.ks("FETCH", "FIRST", "10", "ROWS", "ONLY")
	case r < 6 && g.d == fence.MySQL:
		g.sp()
		g.ks("LIMIT", "0,", "10")
	case r < 7 && shape == "row" && g.d != fence.SQLite:
		g.sp()
		g.ks("FOR", "UPDATE")
	case r < 8 && shape == "row" && g.d == fence.MySQL:
		g.sp()
		g.ks("LOCK", "IN", "SHARE", "MODE")
	}
}

// upsert adds the conflict clause of an upsert.
func (g *gen) upsert() {
	sink := g.sc.Sink
	if g.d == fence.MySQL {
		g.ks("ON", "DUPLICATE", "KEY", "UPDATE")
		g.sp()
		switch g.r.IntN(3) {
		case 0:
			g.fix("n = " + sink + ".n + 1")
		case 1:
			g.fix("val = VALUES(val)")
		default:
			g.fix(sink + ".val = 'u'")
		}
		return
	}
	g.ks("ON", "CONFLICT")
	g.sp()
	switch g.r.IntN(4) {
	case 0:
		g.ks("DO", "NOTHING")
	case 1:
		g.ks("(id)", "DO", "UPDATE", "SET", "val", "=", g.one("excluded.val", "EXCLUDED.val"))
	case 2:
		g.ks("(id)", "DO", "UPDATE", "SET", "n", "=", sink+".n", "+", "1")
	default:
		g.ks("(id)", "DO", "UPDATE", "SET", "val", "=", "'u'", "WHERE", sink+".n", "<", "100")
	}
}

// tail adds what may follow a statement: a semicolon, a comment, a
// newline, or plainly a second statement (the checker must refuse it).
func (g *gen) tail() {
	switch r := g.r.IntN(20); {
	case r < 2:
		g.host("semicolon", ";", "")
	case r < 3:
		g.host("semicolon", " ; -- done", "")
	case r < 4:
		g.host("trailing-comment", " -- done", "")
	case r < 5:
		g.host("second-statement", "; DELETE FROM "+g.sc.Items, "")
	case r < 7:
		g.host("newline", "\n", "")
	}
}
