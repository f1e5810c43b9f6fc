package sqloracle

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/fencekit/fence"
)

var driverBadConn = sqldriver.ErrBadConn

// Attempt is what one run of a statement did, inside a transaction that
// was rolled back.
type Attempt struct {
	N       int64
	Err     error
	Changed bool   // the tables differed after the statement
	Diff    string // the first differences, when Changed
	// Statements is, on SQLite, how many statements SQLite's own tokenizer
	// finds in the text fence sent (SQLiteStatements); 0 elsewhere.
	Statements int
}

// Outcome is what the oracle found for one statement.
type Outcome struct {
	SQL     string
	Args    []any
	Refused error // the checker's ErrInvalid, if it refused the statement
	Stale   Attempt
	Holder  Attempt
}

// Failed reports whether the checker accepted a statement that a stale
// owner ran with effect: it changed a row, or reported success, or (on
// SQLite) the text fence sent holds a second statement.
func (r Outcome) Failed() bool {
	if r.Refused != nil {
		return false
	}
	return r.Stale.Changed || r.Stale.Err == nil || r.Stale.N != 0 || r.Stale.Statements > 1
}

// Why says how a failed outcome failed.
func (r Outcome) Why() string {
	var w []string
	if r.Stale.Err == nil {
		w = append(w, fmt.Sprintf("the stale owner's Exec succeeded (n=%d)", r.Stale.N))
	} else if r.Stale.N != 0 {
		w = append(w, fmt.Sprintf("n=%d with %v", r.Stale.N, r.Stale.Err))
	}
	if r.Stale.Changed {
		w = append(w, "the stale owner changed the tables: "+r.Stale.Diff)
	}
	if r.Stale.Statements > 1 {
		w = append(w, fmt.Sprintf("SQLite's tokenizer finds %d statements in the text fence sent", r.Stale.Statements))
	}
	if r.Stale.Err != nil && r.Stale.Changed {
		w = append(w, "(Exec said: "+short(r.Stale.Err)+")")
	}
	return strings.Join(w, "; ")
}

// Check runs st: as the stale owner and, if the checker accepted it, as
// the holder.
func (o *Oracle) Check(ctx context.Context, st *Stmt) Outcome {
	q, args := st.SQL()
	return o.check(ctx, st.Session, q, args, true)
}

func (o *Oracle) check(ctx context.Context, s Session, q string, args []any, holder bool) Outcome {
	r := Outcome{SQL: q, Args: args}
	r.Stale = o.attempt(ctx, s, o.Stale, q, args)
	if errors.Is(r.Stale.Err, fence.ErrInvalid) {
		r.Refused = r.Stale.Err
		return r
	}
	if holder {
		r.Holder = o.attempt(ctx, s, o.Holder, q, args)
	}
	return r
}

// attempt runs q with token t through ExecIn in a transaction on the
// session's connection, compares the tables before and after inside the
// transaction, and rolls back.
func (o *Oracle) attempt(ctx context.Context, s Session, t fence.Token, q string, args []any) (a Attempt) {
	ctx, cancel := context.WithTimeout(ctx, o.attemptTO)
	defer cancel()
	// The checker decides before anything is sent; ask it first, so a
	// refusal costs no round trip.
	fq, fargs, err := o.stores[s.Handle].Fenced(t, q, args...)
	if errors.Is(err, fence.ErrInvalid) {
		a.Err = err
		return a
	}
	if o.d == fence.SQLite && err == nil {
		a.Statements = SQLiteStatements(fq)
	}
	_ = fargs
	c, err := o.session(ctx, s)
	if err != nil {
		a.Err = err
		return a
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		o.reconnect(ctx, s.Handle)
		a.Err = fmt.Errorf("begin: %w", err)
		return a
	}
	defer func() {
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			o.reconnect(ctx, s.Handle)
		}
	}()
	before, err := o.snapshot(ctx, tx)
	if err != nil {
		a.Err = fmt.Errorf("snapshot before: %w", err)
		return a
	}
	a.N, a.Err = o.stores[s.Handle].ExecIn(ctx, tx, t, q, args...)
	after, err := o.snapshot(ctx, tx)
	if err != nil {
		if a.Err != nil && o.d == fence.Postgres && strings.Contains(err.Error(), "25P02") {
			// The statement failed and PostgreSQL aborted the
			// transaction: nothing of it can commit.
			return a
		}
		a.Changed = true
		a.Diff = "cannot read the tables after the statement: " + err.Error()
		return a
	}
	if after.sig != before.sig {
		a.Changed = true
		a.Diff = o.describe(ctx, tx, before, after)
	}
	return a
}

// table is one table's rows, each a row of column texts.
type table struct {
	name string
	cols []string
	rows [][]string
}

// snap is what the tables held at one moment, as far as a change shows:
// on SQLite every row (the read is in-process and cheap); on the servers
// the rows in Items and Sink and the rows their triggers logged as
// written. (Reading 700 columns of every row cost more than the statement
// under test: 2-5 ms a read on MariaDB, more with a digest of the row.)
type snap struct {
	sig    string
	tables []table
}

func (o *Oracle) snapshot(ctx context.Context, tx *sql.Tx) (snap, error) {
	if o.d != fence.SQLite {
		var l, i, k int64
		err := tx.QueryRowContext(ctx, o.snapQ[0]).Scan(&l, &i, &k)
		return snap{sig: fmt.Sprintf("%d rows logged, %d and %d rows", l, i, k)}, err
	}
	var out snap
	for _, name := range []string{o.Schema.Items, o.Schema.Sink} {
		t, err := readTable(ctx, tx, name, "SELECT * FROM "+name+" ORDER BY id")
		if err != nil {
			return snap{}, err
		}
		out.tables = append(out.tables, t)
	}
	var b strings.Builder
	for _, t := range out.tables {
		for _, r := range t.rows {
			b.WriteString(strings.Join(r, "\x00") + "\n")
		}
		b.WriteString("\n")
	}
	out.sig = b.String()
	return out, nil
}

func readTable(ctx context.Context, tx *sql.Tx, name, q string) (table, error) {
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return table{}, err
	}
	defer rows.Close()
	t := table{name: name}
	t.cols, err = rows.Columns()
	if err != nil {
		return table{}, err
	}
	vals := make([]sql.RawBytes, len(t.cols))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return table{}, err
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			if v == nil {
				row[i] = "NULL"
			} else {
				row[i] = string(v)
			}
		}
		t.rows = append(t.rows, row)
	}
	if err := rows.Close(); err != nil {
		return table{}, err
	}
	return t, rows.Err()
}

// describe says what changed between two snapshots: on SQLite the rows
// that differ, on the servers the rows the triggers logged.
func (o *Oracle) describe(ctx context.Context, tx *sql.Tx, before, after snap) string {
	if o.d == fence.SQLite {
		return diff(before.tables, after.tables)
	}
	d := before.sig + " -> " + after.sig
	t, err := readTable(ctx, tx, "log", o.snapQ[1])
	if err != nil {
		return d + " (" + err.Error() + ")"
	}
	var w []string
	for i, r := range t.rows {
		if i == 4 {
			w = append(w, fmt.Sprintf("and %d more", len(t.rows)-4))
			break
		}
		w = append(w, strings.Join(r, " "))
	}
	return d + ": " + strings.Join(w, "; ")
}

// diff describes the first differences between two snapshots, "" if none.
// Rows are matched by their first column, the id.
func diff(a, b []table) string {
	var out []string
	for i := range a {
		ta, tb := a[i], b[i]
		after := map[string][]string{}
		for _, r := range tb.rows {
			after[r[0]] = r
		}
		seen := map[string]bool{}
		for _, r := range ta.rows {
			seen[r[0]] = true
			s, ok := after[r[0]]
			if !ok {
				out = append(out, fmt.Sprintf("%s: row id %s deleted", ta.name, r[0]))
				continue
			}
			for k := range r {
				if k < len(s) && r[k] != s[k] {
					out = append(out, fmt.Sprintf("%s: row id %s %s %s -> %s", ta.name, r[0], ta.cols[k], r[k], s[k]))
					break
				}
			}
		}
		for _, r := range tb.rows {
			if !seen[r[0]] {
				out = append(out, fmt.Sprintf("%s: row id %s inserted", ta.name, r[0]))
			}
		}
	}
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("and %d more", len(out)-3))
	}
	return strings.Join(out, "; ")
}

// Failure is a statement the oracle caught, with its minimised form.
type Failure struct {
	Dialect fence.Dialect
	// Signature names the failure's cause as far as the oracle can tell:
	// the hostile classes its minimised form still needs, or "plain" and
	// the statement's kind and shape when it fails without any. Failures
	// with one signature are reported once, with a count.
	Signature string
	Count     int // failures with this signature
	Stmt      *Stmt
	Outcome   Outcome
	Minimal   string
	MinArgs   []any
	MinWhy    string
	Tests     int // oracle runs the minimising took
	Minimise  bool
}

func (f Failure) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "a stale owner's write took effect [%s] (%d statements like it): seed %d statement %d (%s), %s, on %s\n",
		f.Signature, f.Count, f.Stmt.Seed, f.Stmt.Index, f.Stmt.Kind, strings.Join(f.Stmt.Classes(), ","), f.Stmt.Session)
	fmt.Fprintf(&b, "  statement: %s args %v\n  found:     %s\n", Quote(f.Outcome.SQL), f.Outcome.Args, f.Outcome.Why())
	if f.Minimise {
		fmt.Fprintf(&b, "  minimised (%d oracle runs): %s args %v\n  found:     %s\n", f.Tests, Quote(f.Minimal), f.MinArgs, f.MinWhy)
	}
	fmt.Fprintf(&b, "  reproduce: FENCE_LONG=1 FENCE_ORACLE_SEED=%d FENCE_ORACLE_ONLY=%d go test -run 'TestOracle/%s$' ./internal/sqloracle", f.Stmt.Seed, f.Stmt.Index, f.Dialect)
	return b.String()
}

// Minimise delta-debugs the hostile spelling of a failing statement: the
// smallest set of its hostile choices (the others put back to their plain
// spelling, removable conjuncts removed) that still fails, by ddmin over
// the choices, within budget oracle runs.
func (o *Oracle) Minimise(ctx context.Context, f *Failure, budget int) {
	var last Outcome
	fails := func(q string, args []any) bool {
		if ctx.Err() != nil {
			return false
		}
		r := o.check(ctx, f.Stmt.Session, q, args, false)
		if r.Failed() {
			last = r
			return true
		}
		return false
	}
	last = f.Outcome
	_, _, f.Signature, f.Tests = f.Stmt.Minimise(fails, budget)
	f.Minimise = true
	f.Minimal, f.MinArgs, f.MinWhy = last.SQL, last.Args, last.Why()
}

// Minimise finds, by ddmin over the statement's choices, the smallest set
// of hostile choices for which fails still holds (given that it holds for
// the statement as generated), within budget calls of fails. It returns
// the minimised statement, its signature and the calls made.
func (s *Stmt) Minimise(fails func(q string, args []any) bool, budget int) (q string, args []any, sig string, tests int) {
	n := s.Choices()
	keep := make([]bool, n)
	var cur []int
	for i := range n {
		cur = append(cur, i)
	}
	build := func(set []int) (string, []any) {
		for i := range keep {
			keep[i] = false
		}
		for _, c := range set {
			keep[c] = true
		}
		return s.Build(func(c int) bool { return keep[c] })
	}
	cur = ddmin(cur, func(set []int) bool {
		if tests >= budget {
			return false
		}
		tests++
		return fails(build(set))
	})
	q, args = build(cur)
	return q, args, s.signature(cur), tests
}

// signature is the statement's kind and the classes of the hostile pieces
// among the kept choices.
func (s *Stmt) signature(kept []int) string {
	pc, _ := s.choices()
	keep := map[int]bool{}
	for _, c := range kept {
		keep[c] = true
	}
	classes := map[string]bool{}
	for i, p := range s.Pieces {
		if pc[i] >= 0 && keep[pc[i]] && p.Class != "" {
			classes[p.Class] = true
		}
	}
	var cs []string
	for c := range classes {
		cs = append(cs, c)
	}
	sort.Strings(cs)
	if len(cs) == 0 {
		// The plain statement fails: its shape is the cause.
		return "plain " + s.Kind
	}
	return strings.Join(cs, "+")
}

// oneClassFails reports whether st fails with the hostile spellings of
// one class only (the first such class, in the order of first use), and
// that class.
func (o *Oracle) oneClassFails(ctx context.Context, st *Stmt) (string, Outcome, bool) {
	pc, n := st.choices()
	groups := n - st.NGroups
	for _, c := range st.Classes() {
		keep := make([]bool, n)
		for i := groups; i < n; i++ {
			keep[i] = true
		}
		for i, p := range st.Pieces {
			if pc[i] >= 0 && p.Class == c {
				keep[pc[i]] = true
			}
		}
		q, args := st.Build(func(i int) bool { return keep[i] })
		if r := o.check(ctx, st.Session, q, args, false); r.Failed() {
			return c, r, true
		}
	}
	return "", Outcome{}, false
}

// plainFails reports whether st fails with every hostile choice undone and
// every removable group removed: then its cause is its plain shape.
func (o *Oracle) plainFails(ctx context.Context, st *Stmt) (Outcome, bool) {
	q, args := st.Build(func(int) bool { return false })
	r := o.check(ctx, st.Session, q, args, false)
	return r, r.Failed()
}

// ddmin is Zeller's delta debugging (complements only): the smallest
// subset of set, by 1-minimality, for which fails holds, given that it
// holds for set.
func ddmin(set []int, fails func([]int) bool) []int {
	if len(set) > 0 && fails(nil) {
		return nil
	}
	n := 2
	for len(set) >= 2 {
		chunk := (len(set) + n - 1) / n
		reduced := false
		for start := 0; start < len(set); start += chunk {
			end := min(start+chunk, len(set))
			rest := append(append([]int{}, set[:start]...), set[end:]...)
			if fails(rest) {
				set = rest
				n = max(n-1, 2)
				reduced = true
				break
			}
		}
		if !reduced {
			if n >= len(set) {
				break
			}
			n = min(2*n, len(set))
		}
	}
	if len(set) == 1 && fails(nil) {
		return nil
	}
	return set
}

// Stats counts what a run did.
type Stats struct {
	Dialect                fence.Dialect
	Seed                   uint64
	Generated, Accepted    int
	Refused                int
	RefusedBy              map[string]int
	HolderWrote            int // accepted statements that changed the tables for the holder
	HolderNoMatch          int // ErrNoMatch: the holder's own condition matched nothing
	HolderFailed           int // the server refused the statement (or the session)
	HolderErrors           map[string]int
	StaleLost, StaleFailed int
	Failures               int
	// HolderMisreported counts the holder's runs that wrote rows while
	// Exec returned an error (a write reported as not done);
	// MisreportExample is the first.
	HolderMisreported int
	MisreportExample  string
	// Disagreements counts the statements whose placeholders the driver or
	// the server counted differently from fence: its lexer and theirs
	// disagreed on where a comment or literal ends (fail-closed here, as
	// the counts did not match); DisagreementExample is the first.
	Disagreements       int
	DisagreementExample string
	ByKind, ByClass     map[string]*Count
	Elapsed             time.Duration
}

// Count is generated / accepted / wrote for one kind or class.
type Count struct{ Generated, Accepted, Wrote, Failed int }

func newStats(d fence.Dialect, seed uint64) *Stats {
	return &Stats{Dialect: d, Seed: seed, RefusedBy: map[string]int{}, HolderErrors: map[string]int{},
		ByKind: map[string]*Count{}, ByClass: map[string]*Count{}}
}

func (s *Stats) add(st *Stmt, r Outcome) {
	s.Generated++
	kind := st.Kind
	if i := strings.IndexByte(kind, '/'); i >= 0 {
		kind = kind[:i]
	}
	counts := []*Count{s.count(s.ByKind, kind)}
	for _, c := range st.Classes() {
		counts = append(counts, s.count(s.ByClass, c))
	}
	if len(st.Classes()) == 0 {
		counts = append(counts, s.count(s.ByClass, "(plain)"))
	}
	for _, c := range counts {
		c.Generated++
	}
	if r.Refused != nil {
		s.Refused++
		s.RefusedBy[reason(r.Refused)]++
		return
	}
	s.Accepted++
	wrote := r.Holder.Changed
	for _, c := range counts {
		c.Accepted++
		if wrote {
			c.Wrote++
		}
		if r.Failed() {
			c.Failed++
		}
	}
	if r.Holder.Err != nil && placeholderMismatch.MatchString(r.Holder.Err.Error()) {
		s.Disagreements++
		if s.DisagreementExample == "" {
			s.DisagreementExample = fmt.Sprintf("%s: %v", Quote(r.SQL), r.Holder.Err)
		}
	}
	if wrote && r.Holder.Err != nil {
		s.HolderMisreported++
		if s.MisreportExample == "" {
			s.MisreportExample = fmt.Sprintf("%s: Exec said %v; the tables: %s", Quote(r.SQL), r.Holder.Err, r.Holder.Diff)
		}
	}
	switch {
	case wrote:
		s.HolderWrote++
	case errors.Is(r.Holder.Err, fence.ErrNoMatch):
		s.HolderNoMatch++
	case r.Holder.Err != nil:
		s.HolderFailed++
		s.HolderErrors[serverError(r.Holder.Err)]++
	}
	switch {
	case r.Failed():
		s.Failures++
	case errors.Is(r.Stale.Err, fence.ErrLost):
		s.StaleLost++
	default:
		s.StaleFailed++
	}
}

func (s *Stats) count(m map[string]*Count, k string) *Count {
	c := m[k]
	if c == nil {
		c = &Count{}
		m[k] = c
	}
	return c
}

var (
	// What database/sql, pgx and the servers say when a statement's
	// placeholders and its arguments do not match.
	placeholderMismatch = regexp.MustCompile(`expected \d+ arguments, got \d+|bind message supplies|mismatched param and argument count|could not determine data type of parameter|there is no parameter \$|unused argument`)
	digits              = regexp.MustCompile(`[0-9]+`)
	quoted              = regexp.MustCompile(`"[^"]*"|'[^']*'|` + "`[^`]*`")
)

// reason is a refusal's message without its particulars, to count them.
func reason(err error) string {
	m := strings.TrimPrefix(err.Error(), fence.ErrInvalid.Error()+": ")
	if i := strings.IndexAny(m, ";("); i > 0 {
		m = m[:i]
	}
	if i := strings.Index(m, ": "); i > 0 {
		m = m[:i]
	}
	m = digits.ReplaceAllString(m, "N")
	return strings.TrimSpace(clip(m, 90))
}

// serverError is a server error without its particulars, to count them.
func serverError(err error) string {
	m := err.Error()
	if i := strings.LastIndex(m, "fenced write"); i >= 0 {
		if j := strings.Index(m[i:], ": "); j >= 0 {
			m = m[i+j+2:]
		}
	}
	if i := strings.Index(m, " near "); i > 0 {
		m = m[:i]
	}
	m = quoted.ReplaceAllString(m, "…")
	m = digits.ReplaceAllString(m, "N")
	return clip(m, 100)
}

func short(err error) string { return clip(err.Error(), 160) }

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Report renders the counts.
func (s *Stats) Report() string {
	var b strings.Builder
	pct := func(a, n int) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(n))
	}
	fmt.Fprintf(&b, "%s, seed %d: %d statements in %s: %d accepted, %d refused; of the accepted, %d wrote as the holder (%s), %d matched nothing (ErrNoMatch), %d failed on the server; stale owner: %d ErrLost, %d other errors, %d FAILURES\n",
		s.Dialect, s.Seed, s.Generated, s.Elapsed.Round(time.Millisecond), s.Accepted, s.Refused,
		s.HolderWrote, pct(s.HolderWrote, s.Accepted), s.HolderNoMatch, s.HolderFailed, s.StaleLost, s.StaleFailed, s.Failures)
	if s.HolderMisreported > 0 {
		fmt.Fprintf(&b, "  the holder's write changed rows but Exec returned an error %d times; the first: %s\n", s.HolderMisreported, s.MisreportExample)
	}
	if s.Disagreements > 0 {
		fmt.Fprintf(&b, "  placeholders counted differently by the driver or server than by fence (a lexer disagreement, fail-closed) %d times; the first: %s\n", s.Disagreements, clip(s.DisagreementExample, 400))
	}
	b.WriteString("  refused by reason:\n")
	for _, kv := range sortedCounts(s.RefusedBy) {
		fmt.Fprintf(&b, "    %6d  %s\n", kv.n, kv.k)
	}
	b.WriteString("  by statement kind (generated / accepted / wrote as holder / failures):\n")
	for _, k := range sortedNames(s.ByKind) {
		c := s.ByKind[k]
		fmt.Fprintf(&b, "    %-16s %6d %6d %6d %4d\n", k, c.Generated, c.Accepted, c.Wrote, c.Failed)
	}
	b.WriteString("  by hostile class used (generated / accepted / wrote as holder / failures):\n")
	for _, k := range sortedNames(s.ByClass) {
		c := s.ByClass[k]
		fmt.Fprintf(&b, "    %-18s %6d %6d %6d %4d\n", k, c.Generated, c.Accepted, c.Wrote, c.Failed)
	}
	b.WriteString("  holder's server errors, most frequent:\n")
	for i, kv := range sortedCounts(s.HolderErrors) {
		if i == 8 {
			break
		}
		fmt.Fprintf(&b, "    %6d  %s\n", kv.n, kv.k)
	}
	return b.String()
}

type kv struct {
	k string
	n int
}

func sortedCounts(m map[string]int) []kv {
	var out []kv
	for k, n := range m {
		out = append(out, kv{k, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n > out[j].n || out[i].n == out[j].n && out[i].k < out[j].k })
	return out
}

func sortedNames(m map[string]*Count) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// RunOptions bound a run.
type RunOptions struct {
	Seed  uint64
	Count int       // statements to generate; 0 for no bound
	Until time.Time // stop generating then; zero for no bound
	Only  int64     // run only this statement index (reproduction), -1 for all
	// MaxMinimise bounds how many failures are minimised (each takes up to
	// MinimiseBudget oracle runs); later ones are reported as found.
	MaxMinimise, MinimiseBudget int
	Progress                    func(s *Stats)
	// Soup runs the boundary check's statements (Schema.Soup) instead.
	Soup bool
	// Trace, if set, sees every statement and its outcome.
	Trace func(st *Stmt, r Outcome)
}

// Run generates and checks statements until the count or the time is
// reached, and returns the failures, one per signature.
func (o *Oracle) Run(ctx context.Context, opt RunOptions) (*Stats, []Failure) {
	st := newStats(o.d, opt.Seed)
	start := time.Now()
	var fails []Failure
	bySig := map[string]int{}
	minimised := 0
	for i := uint64(0); ; i++ {
		if opt.Only >= 0 && i != uint64(opt.Only) {
			if i > uint64(opt.Only) {
				break
			}
			continue
		}
		if opt.Count > 0 && int(i) >= opt.Count || !opt.Until.IsZero() && time.Now().After(opt.Until) || ctx.Err() != nil {
			break
		}
		stmt := o.Schema.Generate(opt.Seed, i)
		if opt.Soup {
			stmt = o.Schema.Soup(opt.Seed, i)
		}
		r := o.Check(ctx, stmt)
		st.add(stmt, r)
		if opt.Trace != nil {
			opt.Trace(stmt, r)
		}
		if r.Failed() {
			f := Failure{Dialect: o.d, Stmt: stmt, Outcome: r, Count: 1}
			// A failure its plain form shares is one cause, whatever the
			// spelling: found with one oracle run, no minimising.
			if pr, ok := o.plainFails(ctx, stmt); ok {
				f.Minimise, f.Tests, f.Minimal, f.MinArgs, f.MinWhy = true, 1, pr.SQL, pr.Args, pr.Why()
				f.Signature = stmt.signature(nil)
			} else if c, r, ok := o.oneClassFails(ctx, stmt); ok && bySig[c] > 0 {
				// The hostile spellings of one class alone fail, and a
				// failure of that class was minimised already.
				f.Minimise, f.Tests, f.Minimal, f.MinArgs, f.MinWhy = true, 1, r.SQL, r.Args, r.Why()
				f.Signature = c
			} else if minimised < opt.MaxMinimise {
				minimised++
				o.Minimise(ctx, &f, opt.MinimiseBudget)
			} else {
				f.Signature = "not minimised: " + strings.Join(stmt.Classes(), "+")
			}
			if j, ok := bySig[f.Signature]; ok {
				fails[j-1].Count++
			} else {
				fails = append(fails, f)
				bySig[f.Signature] = len(fails)
			}
		}
		if opt.Progress != nil && i > 0 && i%1000 == 0 {
			st.Elapsed = time.Since(start)
			opt.Progress(st)
		}
	}
	st.Elapsed = time.Since(start)
	return st, fails
}
