package main

import (
	"errors"
	"fmt"
	"strings"
)

// span is one statement of a migration file: text[start:end] runs from its
// first token to its terminating semicolon, inclusive.
type span struct{ start, end int }

// splitSQL finds the statements of a migration file. It knows what can hide
// a semicolon: comments, quoted strings and identifiers, PostgreSQL's
// dollar quotes and, for trigger and routine bodies, BEGIN ... END (and
// CASE ... END inside them). The embedded migrations are split by the
// databases themselves (SQLite and PostgreSQL take a whole file) or at every
// semicolon (MySQL, whose files promise none inside a statement); goose
// splits at lines that end with a semicolon, so the generator needs the true
// boundaries to see where goose would get them wrong.
func splitSQL(text, dialect string) ([]span, error) {
	var (
		out   []span
		start = -1 // first token of the current statement
		depth int  // open BEGIN/CASE blocks
	)
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '-' && strings.HasPrefix(text[i:], "--"):
			i = lineEnd(text, i)
			continue
		case c == '/' && strings.HasPrefix(text[i:], "/*"):
			j := strings.Index(text[i+2:], "*/")
			if j < 0 {
				return nil, fmt.Errorf("unterminated /* comment at line %d", lineOf(text, i)+1)
			}
			i += 2 + j + 2
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		}
		if start < 0 {
			start = i
		}
		switch {
		case c == ';':
			if depth == 0 {
				out = append(out, span{start, i + 1})
				start = -1
			}
			i++
		case c == '\'' || c == '"' || (c == '`' && dialect == "mysql"):
			j, err := skipQuoted(text, i, dialect == "mysql")
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$' && dialect == "postgres":
			j, err := skipDollar(text, i)
			if err != nil {
				return nil, err
			}
			i = j
		case isWordByte(c):
			j := i
			for j < len(text) && isWordByte(text[j]) {
				j++
			}
			switch strings.ToUpper(text[i:j]) {
			case "BEGIN", "CASE":
				depth++
			case "END":
				// END IF / END LOOP / END WHILE / END REPEAT close blocks
				// that did not open one.
				switch strings.ToUpper(nextWord(text, j)) {
				case "IF", "LOOP", "WHILE", "REPEAT":
				default:
					if depth > 0 {
						depth--
					}
				}
			}
			i = j
		default:
			i++
		}
	}
	if start >= 0 {
		return nil, fmt.Errorf("statement at line %d has no terminating semicolon", lineOf(text, start)+1)
	}
	if depth != 0 {
		return nil, errors.New("BEGIN or CASE without END")
	}
	return out, nil
}

// skipQuoted returns the index after the quoted string or identifier at i.
// A doubled quote is an escaped one; with backslash, so is \x (MySQL strings).
func skipQuoted(text string, i int, backslash bool) (int, error) {
	q := text[i]
	for j := i + 1; j < len(text); j++ {
		switch {
		case backslash && q != '`' && text[j] == '\\':
			j++
		case text[j] == q && j+1 < len(text) && text[j+1] == q:
			j++
		case text[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated %c quote at line %d", q, lineOf(text, i)+1)
}

// skipDollar returns the index after the dollar-quoted string at i, or i+1
// when the $ starts none (a $1 placeholder).
func skipDollar(text string, i int) (int, error) {
	j := i + 1
	for j < len(text) && isWordByte(text[j]) && !(j == i+1 && text[j] >= '0' && text[j] <= '9') {
		j++
	}
	if j >= len(text) || text[j] != '$' {
		return i + 1, nil
	}
	tag := text[i : j+1]
	k := strings.Index(text[j+1:], tag)
	if k < 0 {
		return 0, fmt.Errorf("unterminated %s quote at line %d", tag, lineOf(text, i)+1)
	}
	return j + 1 + k + len(tag), nil
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// nextWord returns the word that follows text[i:] after spaces.
func nextWord(text string, i int) string {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') {
		i++
	}
	j := i
	for j < len(text) && isWordByte(text[j]) {
		j++
	}
	return text[i:j]
}

func lineEnd(text string, i int) int {
	if j := strings.IndexByte(text[i:], '\n'); j >= 0 {
		return i + j
	}
	return len(text)
}

func lineOf(text string, i int) int { return strings.Count(text[:i], "\n") }

// gooseEndsStatement is goose's rule (internal/sqlparser.endsWithSemicolon)
// for the end of a statement outside StatementBegin/End: the last word before
// any "--" ends with a semicolon.
func gooseEndsStatement(line string) bool {
	prev := ""
	for w := range strings.FieldsSeq(line) {
		if strings.HasPrefix(w, "--") {
			break
		}
		prev = w
	}
	return strings.HasSuffix(prev, ";")
}

// gooseBody returns text with each statement that goose's line rule would
// split wrongly wrapped in -- +goose StatementBegin / StatementEnd. Every
// other line is kept as it is, comments included.
func gooseBody(text string, spans []span) (string, error) {
	lines := strings.Split(text, "\n")
	for n, l := range lines {
		if strings.Contains(l, "+goose") {
			return "", fmt.Errorf("line %d mentions +goose, which goose would read as an annotation", n+1)
		}
	}
	var b strings.Builder
	next := 0 // first line not yet written
	for _, s := range spans {
		first, last := lineOf(text, s.start), lineOf(text, s.end-1)
		if first < next {
			return "", fmt.Errorf("line %d holds the end of one statement and the start of another; put each on its own lines", first+1)
		}
		if rest := strings.TrimSpace(text[s.end:lineEnd(text, s.end)]); rest != "" && !strings.HasPrefix(rest, "--") {
			return "", fmt.Errorf("line %d continues after its statement's semicolon", last+1)
		}
		for _, l := range lines[next:first] {
			b.WriteString(l + "\n")
		}
		block := !gooseEndsStatement(lines[last])
		for _, l := range lines[first:last] {
			block = block || gooseEndsStatement(l)
		}
		if block {
			b.WriteString("-- +goose StatementBegin\n")
		}
		for _, l := range lines[first : last+1] {
			b.WriteString(l + "\n")
		}
		if block {
			b.WriteString("-- +goose StatementEnd\n")
		}
		next = last + 1
	}
	for _, l := range lines[next:] {
		b.WriteString(l + "\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n", nil
}
