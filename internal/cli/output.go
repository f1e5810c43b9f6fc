package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-isatty"

	"github.com/fencekit/fence"
)

// isTerminal reports whether v is an *os.File open on a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// color reports whether output to stdout may use colour: only on a terminal,
// never with NO_COLOR set (https://no-color.org) or TERM=dumb.
func (a *app) color() bool {
	return isTerminal(a.stdout) && a.getenv("NO_COLOR") == "" && a.getenv("TERM") != "dumb"
}

// ANSI foreground colours. Every code is two digits, so every coloured cell
// of a column gets the same number of invisible bytes and tabwriter, which
// counts them, still aligns the columns.
const (
	fgDefault = "39"
	fgRed     = "31"
	fgGreen   = "32"
	fgYellow  = "33"
	fgGrey    = "90"
)

// table writes an aligned table with text/tabwriter. One column may be
// coloured by its value.
type table struct {
	tw       *tabwriter.Writer
	colorCol int // -1: none
	colorOf  func(cell string) string
}

func newTable(w io.Writer, color bool, colorCol int, colorOf func(string) string, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0), colorCol: -1}
	if color {
		t.colorCol, t.colorOf = colorCol, colorOf
	}
	t.write(header, fgDefault)
	return t
}

func (t *table) row(cells ...string) { t.write(cells, "") }

func (t *table) write(cells []string, fg string) {
	for i, c := range cells {
		c = cellText(c)
		if i == t.colorCol {
			code := fg
			if code == "" {
				code = t.colorOf(c)
			}
			c = "\x1b[" + code + "m" + c + "\x1b[0m"
		}
		if i > 0 {
			io.WriteString(t.tw, "\t")
		}
		io.WriteString(t.tw, c)
	}
	io.WriteString(t.tw, "\n")
}

func (t *table) flush() error { return t.tw.Flush() }

// maxCell bounds a table cell, in runes after escaping: a lease name or an
// error may be huge (an error quoting a 120 KB hostname), and one cell must
// not turn a listing into megabytes.
const maxCell = 200

// cellText keeps a cell on one line and shows it as what it is. A lease
// name or error text is user data: C0 and C1 controls (terminal escape
// sequences), bidi overrides and isolates (U+202A–U+202E, U+2066–U+2069,
// which reorder what follows), zero-width characters (U+200B–U+200F,
// U+FEFF, which make two names look alike), line separators and invalid
// UTF-8 are printed as Go escapes (\x1b, \u202e), visible and copyable.
// This holds for every table, on a terminal or not, so that a pipe shows
// the same as the screen; --json output stays exact.
func cellText(s string) string {
	if s == "" {
		return "-"
	}
	var b strings.Builder
	n := 0
	for i, r := range s {
		if n >= maxCell {
			fmt.Fprintf(&b, "… (%d bytes)", len(s))
			break
		}
		n++
		switch {
		case r == utf8.RuneError && !validAt(s, i):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case unsafeRune(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// validAt reports whether s holds a valid encoding at i (a literal U+FFFD).
func validAt(s string, i int) bool {
	r, size := utf8.DecodeRuneInString(s[i:])
	return r != utf8.RuneError || size > 1
}

// unsafeRune reports whether r may not reach a terminal as is.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f: // C0, DEL, C1
		return true
	case r >= 0x200b && r <= 0x200f, r == 0xfeff: // zero width, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // bidi
		return true
	case r == 0x2028 || r == 0x2029 || r == 0x061c: // line/paragraph separators, ALM
		return true
	}
	return false
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonTimeLayout is how times appear in --json output: RFC 3339, UTC,
// milliseconds (the resolution of fence's database clock).
const jsonTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// jsonTime formats t for --json, or nil when t is zero.
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(jsonTimeLayout)
	return &s
}

// tableTime formats t for a table, in local time.
func tableTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// human formats a duration for people: 850ms, 27.4s, 3m12s, 2h5m0s.
func human(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		s = fmt.Sprintf("%.1fs", d.Seconds())
	default:
		s = d.Round(time.Second).String()
	}
	if neg {
		return "-" + s
	}
	return s
}

var plainNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:/@#+=-]+$`)

// quoteName prints a lease name as is when that is unambiguous, else quoted.
func quoteName(name string) string {
	if plainNameRE.MatchString(name) {
		return name
	}
	return fmt.Sprintf("%q", clip(name))
}

// unnamed stands for the holder name of a row written before fence recorded
// names (schema v3): someone holds or held it, under no name.
const unnamed = "(unnamed)"

// holderCell is a HOLDER cell: the name, "(unnamed)" for a row without
// one, or "" ("-") when nobody holds it since a revoke.
func holderCell(holder string, state fence.State) string {
	if holder == "" && state != fence.StateRevoked {
		return unnamed
	}
	return holder
}

// holderText is a holder name in a message: quoted, so that any control
// character a row written outside fence carries is escaped, or "an unnamed
// holder".
func holderText(holder string) string {
	if holder == "" {
		return "an unnamed holder"
	}
	return strconv.Quote(holder)
}

func stateColor(state string) string {
	switch state {
	case "held", "running":
		return fgGreen
	case "succeeded":
		return fgGreen
	case "expired", "abandoned":
		return fgYellow
	case "revoked", "lost", "failed":
		return fgRed
	case "released":
		return fgGrey
	}
	return fgDefault
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
