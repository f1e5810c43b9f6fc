package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
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

var controlRE = regexp.MustCompile(`[\x00-\x1f\x7f]+`)

// cellText keeps a cell on one line and free of escape sequences from the
// database (a lease name or error text is user data).
func cellText(s string) string {
	if s == "" {
		return "-"
	}
	return controlRE.ReplaceAllString(s, " ")
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

// short is the first 8 characters of an owner token, as in fence.Token.Short.
func short(owner string) string {
	if len(owner) > 8 {
		return owner[:8]
	}
	return owner
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
