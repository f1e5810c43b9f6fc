package fence_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// `go doc fence.X` shows the first sentence of X's doc comment as what X
// is; it must be about X. Every exported function, method and type of the
// root package has a doc comment whose first sentence names it ("Run
// acquires …", "A Lease is …"). Run's began with a paragraph about who
// notices a stall first.
func TestDocCommentsStartWithTheirName(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	checked := 0
	check := func(name string, doc *ast.CommentGroup, pos token.Pos) {
		checked++
		if doc == nil {
			t.Errorf("%s: %s has no doc comment", fset.Position(pos), name)
			return
		}
		first := strings.TrimSpace(doc.Text())
		for _, article := range []string{"A ", "An ", "The "} {
			first = strings.TrimPrefix(first, article)
		}
		if !strings.HasPrefix(first, name+" ") && !strings.HasPrefix(first, name+"'s ") && !strings.HasPrefix(first, name+",") {
			t.Errorf("%s: the doc comment of %s begins %q: its first sentence should say what %s is or does", fset.Position(pos), name, clipDoc(first), name)
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil {
					// Methods of unexported types, and interface-satisfying
					// Error/Is/Unwrap/String, say what they do by convention.
					switch d.Name.Name {
					case "Error", "Is", "Unwrap", "String", "MarshalJSON", "UnmarshalJSON", "Format", "LogValue", "Now", "Sleep":
						continue
					}
					if !ast.IsExported(recvName(d.Recv.List[0].Type)) {
						continue
					}
				}
				check(d.Name.Name, d.Doc, d.Pos())
			case *ast.GenDecl:
				if d.Tok != token.TYPE {
					continue
				}
				for _, sp := range d.Specs {
					ts := sp.(*ast.TypeSpec)
					if !ts.Name.IsExported() {
						continue
					}
					doc := ts.Doc
					if doc == nil && len(d.Specs) == 1 {
						doc = d.Doc
					}
					check(ts.Name.Name, doc, ts.Pos())
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d declarations; the walk is broken", checked)
	}
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return recvName(e.X)
	}
	return ""
}

func clipDoc(s string) string {
	if len(s) > 70 {
		return s[:70] + "…"
	}
	return s
}
