package sqloracle

import (
	"fmt"
	"strings"
)

// Piece is a stretch of a generated statement. A fixed piece has Text ==
// Plain. A hostile piece is a spelling chosen to disagree with a lexer or a
// checker (a control byte for a space, a keyword for a column name, a
// number glued to OR); Plain is the ordinary spelling of the same thing
// ("" when the piece can simply go), and minimising a failure puts Plain
// back wherever the failure does not need Text.
type Piece struct {
	Text, Plain     string
	Args, PlainArgs []any // arguments of the ? placeholders of Text and Plain
	Class           string
	// Link is 1 + the index of the piece whose choice this one follows (an
	// alias and every qualifier naming it), 0 for none.
	Link   int
	groups []int
}

// Stmt is one generated statement: its pieces, the groups of pieces that
// can be removed whole (a conjunct with its AND), and the session it runs
// in. Seed and Index reproduce it: Generate(seed, index) makes it again on
// the same server (the keyword list and the probes come from the server).
type Stmt struct {
	Seed, Index uint64
	Kind        string
	Session     Session
	Pieces      []Piece
	NGroups     int
}

// A choice is one thing minimising can undo: a hostile piece (back to
// Plain) or a group (removed). Choices are numbered hostile pieces first,
// then groups.
func (s *Stmt) choices() (pieceChoice []int, n int) {
	pieceChoice = make([]int, len(s.Pieces))
	for i, p := range s.Pieces {
		pieceChoice[i] = -1
		if p.Link == 0 && (p.Text != p.Plain || !sameArgs(p.Args, p.PlainArgs)) {
			pieceChoice[i] = n
			n++
		}
	}
	return pieceChoice, n + s.NGroups
}

// Choices is how many choices the statement has.
func (s *Stmt) Choices() int { _, n := s.choices(); return n }

// Build renders the statement with choice c taken (hostile piece, group
// kept) where keep(c) is true.
func (s *Stmt) Build(keep func(c int) bool) (string, []any) {
	pc, n := s.choices()
	groupBase := n - s.NGroups
	var b strings.Builder
	var args []any
	for i, p := range s.Pieces {
		dropped := false
		for _, g := range p.groups {
			if !keep(groupBase + g - 1) {
				dropped = true
				break
			}
		}
		if dropped {
			continue
		}
		c := pc[i]
		if p.Link > 0 {
			c = pc[p.Link-1]
		}
		if c < 0 || keep(c) {
			b.WriteString(p.Text)
			args = append(args, p.Args...)
		} else {
			b.WriteString(p.Plain)
			args = append(args, p.PlainArgs...)
		}
	}
	return b.String(), args
}

// SQL is the statement as generated.
func (s *Stmt) SQL() (string, []any) { return s.Build(func(int) bool { return true }) }

// Classes lists the hostile classes the statement uses, in order of first use.
func (s *Stmt) Classes() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range s.Pieces {
		if p.Class != "" && !seen[p.Class] {
			seen[p.Class] = true
			out = append(out, p.Class)
		}
	}
	return out
}

func sameArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Quote renders q for a report: Go's quoting, so that control bytes and
// bytes that are not UTF-8 show as escapes.
func Quote(q string) string { return fmt.Sprintf("%q", q) }
