package ops_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/teststore"
)

// htmlProblems checks a served page as an HTML5 parser reads it, and
// returns what is wrong:
//
//   - parse errors the page's own markup must not have: an end tag with no
//     open element of its name, an element closed across another one, text
//     where the parser must move it elsewhere (a table's rows, between
//     sections), an element left open at the end. The tokenizer of
//     golang.org/x/net/html gives the tokens exactly as the parser sees
//     them; the stack below is the tree-construction stage's open elements
//     for the page's own (explicitly closed) markup;
//   - the tree the full HTML5 parser (html.Parse) builds: duplicate ids,
//     a section heading that appears twice, a table without a header row
//     or with rows whose cell count (colspans included) differs from its
//     header's.
func htmlProblems(page string) []string {
	var out []string
	bad := func(line int, format string, a ...any) {
		out = append(out, fmt.Sprintf("line %d: ", line)+fmt.Sprintf(format, a...))
	}

	// Tokens.
	z := html.NewTokenizer(strings.NewReader(page))
	var stack []openTag
	line := 1
	for {
		tt := z.Next()
		raw := string(z.Raw())
		tokLine := line
		line += strings.Count(raw, "\n")
		switch tt {
		case html.ErrorToken:
			for _, o := range stack {
				bad(o.line, "<%s> is never closed", o.name)
			}
			if len(out) == 0 && !strings.Contains(page, "</html>") {
				bad(line, "the page ends before </html>")
			}
			return append(out, treeProblems(page)...)
		case html.DoctypeToken:
			if tokLine != 1 || !strings.EqualFold(string(z.Token().Data), "html") {
				bad(tokLine, "doctype %q is not <!doctype html> at the start", raw)
			}
		case html.StartTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			if voidElement[a] {
				continue
			}
			stack = append(stack, openTag{string(name), tokLine})
		case html.SelfClosingTagToken:
			// Only void elements and SVG's foreign elements may close
			// themselves.
			name, _ := z.TagName()
			if !voidElement[atom.Lookup(name)] && !inSVG(stack) {
				bad(tokLine, "<%s/> outside SVG: HTML ignores the slash and leaves it open", name)
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if len(stack) == 0 {
				bad(tokLine, "end tag </%s> with nothing open", name)
				continue
			}
			top := stack[len(stack)-1]
			if top.name == string(name) {
				stack = stack[:len(stack)-1]
				continue
			}
			found := -1
			for i := len(stack) - 1; i >= 0; i-- {
				if stack[i].name == string(name) {
					found = i
					break
				}
			}
			if found < 0 {
				bad(tokLine, "end tag </%s> without an open <%s> (a stray fragment?): %q", name, name, clipText(raw))
				continue
			}
			bad(tokLine, "end tag </%s> closes <%s> of line %d, still open", name, top.name, top.line)
			stack = stack[:found]
		case html.TextToken:
			if strings.TrimSpace(raw) == "" || len(stack) == 0 {
				if strings.TrimSpace(raw) != "" {
					bad(tokLine, "text outside <html>: %q", clipText(raw))
				}
				continue
			}
			switch parent := stack[len(stack)-1].name; parent {
			case "html", "head", "body", "table", "thead", "tbody", "tfoot", "tr", "ul", "ol", "nav", "section":
				// In a table the parser moves the text in front of the
				// table ("foster parenting"); elsewhere it is text with no
				// element to say what it is.
				bad(tokLine, "stray text directly in <%s>: %q", parent, clipText(raw))
			}
		}
	}
}

// treeProblems checks the tree html.Parse builds from page.
func treeProblems(page string) []string {
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		return []string{"html.Parse: " + err.Error()}
	}
	var out []string
	ids := map[string]int{}
	headings := map[string]int{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if id := attr(n, "id"); id != "" {
				ids[id]++
			}
			switch n.DataAtom {
			case atom.H2:
				headings[headingText(n)]++
			case atom.Table:
				out = append(out, tableProblems(n)...)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	for id, n := range ids {
		if n > 1 {
			out = append(out, fmt.Sprintf("id %q appears %d times", id, n))
		}
	}
	for h, n := range headings {
		if n > 1 {
			out = append(out, fmt.Sprintf("section %q appears %d times", h, n))
		}
	}
	return out
}

// tableProblems: a table has one header row of th cells, and each body row
// as many cells (counting colspans) as the header.
func tableProblems(t *html.Node) []string {
	name := attr(t, "id")
	var out []string
	var head []*html.Node
	var rows [][]*html.Node
	for sec := t.FirstChild; sec != nil; sec = sec.NextSibling {
		for tr := sec.FirstChild; tr != nil; tr = tr.NextSibling {
			if tr.DataAtom != atom.Tr {
				continue
			}
			var cells []*html.Node
			for c := tr.FirstChild; c != nil; c = c.NextSibling {
				if c.DataAtom == atom.Td || c.DataAtom == atom.Th {
					cells = append(cells, c)
				}
			}
			if sec.DataAtom == atom.Thead {
				if head != nil {
					out = append(out, fmt.Sprintf("table %q: a second header row", name))
				}
				head = cells
			} else {
				rows = append(rows, cells)
			}
		}
	}
	if len(head) == 0 {
		return append(out, fmt.Sprintf("table %q has no header row", name))
	}
	for _, c := range head {
		if c.DataAtom != atom.Th || headingText(c) == "" {
			out = append(out, fmt.Sprintf("table %q: header cell %q is not a named <th>", name, headingText(c)))
		}
	}
	for i, r := range rows {
		n := 0
		for _, c := range r {
			span := 1
			fmt.Sscan(attr(c, "colspan"), &span)
			n += span
		}
		if n != len(head) {
			out = append(out, fmt.Sprintf("table %q: row %d has %d cells, the header %d", name, i+1, n, len(head)))
		}
	}
	return out
}

var voidElement = map[atom.Atom]bool{
	atom.Area: true, atom.Base: true, atom.Br: true, atom.Col: true, atom.Embed: true, atom.Hr: true,
	atom.Img: true, atom.Input: true, atom.Link: true, atom.Meta: true, atom.Source: true,
	atom.Track: true, atom.Wbr: true,
}

// openTag is an element the tokenizer opened and has not seen closed.
type openTag struct {
	name string
	line int
}

func inSVG(stack []openTag) bool {
	for _, o := range stack {
		if o.name == "svg" {
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// headingText is the text of n without the text of its .count children.
func headingText(n *html.Node) string {
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		if n.Type == html.ElementNode && strings.Contains(" "+attr(n, "class")+" ", " count ") {
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}

func clipText(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// The page as served, with every kind of row and the timeline, is HTML5
// without parse errors, each id and section once, every table with its
// header row. It failed on the page with a stray `ass="num">Exit</th>` and
// a second "Stale rejections" section.
func TestPageIsWellFormedHTML(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		f := populate(t, b.Open(t))
		srv := httptest.NewServer(ops.Handler(f.store))
		defer srv.Close()
		for _, path := range []string{"/", "/?lease=nightly-report", "/?lease=none-such"} {
			resp, page := get(t, srv.URL+path)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s = %s", path, resp.Status)
			}
			for _, p := range htmlProblems(page) {
				t.Errorf("GET %s: %s", path, p)
			}
		}
	})
}

// The check itself finds each kind of fault it claims to.
func TestHTMLProblemsFindsFaults(t *testing.T) {
	good := `<!doctype html><html lang="en"><head><title>x</title></head><body>` +
		`<section><h2>A<span class="count">1</span></h2><table id="a"><thead><tr><th>X</th><th>Y</th></tr></thead>` +
		`<tbody><tr><td>1</td><td>2</td></tr><tr class="empty"><td colspan="2">none</td></tr></tbody></table></section>` +
		`<svg id="s"><rect x="1"/></svg></body></html>`
	if p := htmlProblems(good); len(p) != 0 {
		t.Fatalf("a good page: %v", p)
	}
	for name, tc := range map[string]struct{ page, want string }{
		"stray fragment": {strings.Replace(good, "</section>", "</section>\nass=\"num\">Exit</th>", 1), "stray text directly in <body>"},
		"stray end tag":  {strings.Replace(good, "</section>", "</section></th>", 1), "end tag </th> without an open <th>"},
		"duplicate id":   {strings.Replace(good, `<svg id="s">`, `<svg id="a">`, 1), `id "a" appears 2 times`},
		"repeated section": {strings.Replace(good, "</section>", "</section><section><h2>A<span class=\"count\">3</span></h2></section>", 1),
			`section "A" appears 2 times`},
		"no header":       {strings.Replace(good, `<thead><tr><th>X</th><th>Y</th></tr></thead>`, "", 1), `table "a" has no header row`},
		"short row":       {strings.Replace(good, "<td>2</td>", "", 1), `table "a": row 1 has 1 cells, the header 2`},
		"unclosed":        {strings.Replace(good, "</section>", "", 1), "closes <section>"},
		"never closed":    {strings.TrimSuffix(good, "</body></html>"), "<body> is never closed"},
		"misnested":       {strings.Replace(good, "<h2>A", "<h2><b>A", 1), "end tag </h2> closes <b>"},
		"text in table":   {strings.Replace(good, "<tbody>", "<tbody>oops", 1), "stray text directly in <tbody>"},
		"html self-close": {strings.Replace(good, "<h2>", "<h2/><h2>", 1), "<h2/> outside SVG"},
	} {
		found := false
		for _, p := range htmlProblems(tc.page) {
			found = found || strings.Contains(p, tc.want)
		}
		if !found {
			t.Errorf("%s: want a problem with %q, got %v", name, tc.want, htmlProblems(tc.page))
		}
	}
}
