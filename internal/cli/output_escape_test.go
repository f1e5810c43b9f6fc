package cli

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// A lease name or error is user data: nothing in it may reach a terminal
// as a control, a reordering or an invisible character, and no cell may be
// huge. The old cellText let C1 controls, bidi overrides and zero-width
// characters through raw and never clipped.
func TestCellTextEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"job\u0085x":             `job\x85x`,   // C1 NEL
		"job\u009b31m":           `job\x9b31m`, // C1 CSI: an escape sequence on its own
		"\u202egnp.exe":          `\u202egnp.exe`,
		"a\u2066b\u2069":         `a\u2066b\u2069`,
		"nightly\u200breport":    `nightly\u200breport`,
		"\ufeffbom":              `\ufeffbom`,
		"l\u200e\u200fr":         `l\u200e\u200fr`,
		"x\x1b]0;title\x07":      `x\x1b]0;title\x07`,
		"bad\xffutf8":            `bad\xffutf8`,
		"line\u2028sep":          `line\u2028sep`,
		"a\tb\nc":                "a b c",
		"plain-name":             "plain-name",
		"naïve ünïcode ✓ 日本":     "naïve ünïcode ✓ 日本",
		"literal \ufffd is fine": "literal \ufffd is fine",
	} {
		if got := cellText(in); got != want {
			t.Errorf("cellText(%q) = %q, want %q", in, got, want)
		}
	}

	huge := "host-" + strings.Repeat("h", 120<<10)
	got := cellText(huge)
	if n := utf8.RuneCountInString(got); n > maxCell+40 || !strings.HasSuffix(got, "… (122885 bytes)") {
		t.Errorf("a 120 KB cell came out as %d runes ending %q", n, got[max(0, len(got)-30):])
	}

	// The same through a table, as fence leases and fence runs print it.
	var buf bytes.Buffer
	tb := newTable(&buf, true, 1, stateColor, "NAME", "STATE")
	tb.row("evil\u202e\u200b\u0085", "held")
	tb.row(huge, "held")
	tb.flush()
	out := buf.String()
	for _, bad := range []string{"\u202e", "\u200b", "\u0085"} {
		if strings.Contains(out, bad) {
			t.Errorf("table carries %q raw:\n%s", bad, out)
		}
	}
	if len(out) > 2000 {
		t.Errorf("a table with a 120 KB name is %d bytes", len(out))
	}
}
