package fence_test

import (
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A Go sample in the README or a package doc is only as good as the code it
// was copied from. Every ```go block of the READMEs and guides, and every Go code block
// of a package doc must equal, up to whitespace, either a whole function
// body or a run of whole top-level declarations (functions with their doc
// comments) in one of the module's _test.go files, where it is compiled and
// run (Example functions, and the tests of docs_samples_test.go on each
// database a sample claims). A sample that drifts from its compiled copy, or
// elides part of it, fails here with the place to look.

// sampleDocs are the package docs whose Go code blocks are checked, by
// package directory.
var sampleDocs = []string{".", "fencehttp", "fencegocron", "fenceprom", "fenceotel", "task", "migrations"}

type docSample struct {
	where string // file:line
	text  string
}

func TestDocSamplesAreCompiled(t *testing.T) {
	var samples []docSample
	for _, f := range docPages(t) {
		samples = append(samples, markdownGoBlocks(t, f)...)
	}
	readme := len(samples)
	for _, dir := range sampleDocs {
		samples = append(samples, packageDocGoBlocks(t, dir)...)
	}
	// The test cannot pass by finding nothing to check.
	if readme < 4 || len(samples)-readme < 5 {
		t.Fatalf("found %d Go samples in the READMEs and %d in package docs; the extraction is broken", readme, len(samples)-readme)
	}
	cands := compiledCandidates(t)
	for _, s := range samples {
		want := normalizeSample(s.text)
		if _, ok := cands[want]; ok {
			continue
		}
		t.Errorf("%s: Go sample matches no compiled function body or declarations in a _test.go file; "+
			"copy it from (or into) its Example, then run it.\nclosest: %s\nsample:\n%s", s.where, closestCompiled(want, cands), s.text)
	}
}

// docPages are the Markdown pages whose Go samples are checked: the
// READMEs and the guides of docs/guides.
func docPages(t *testing.T) []string {
	guides, err := filepath.Glob("docs/guides/*.md")
	if err != nil || len(guides) == 0 {
		t.Fatalf("no guides in docs/guides: %v", err)
	}
	return append([]string{"README.md", "cmd/fence/README.md"}, guides...)
}

var fenceRE = regexp.MustCompile("(?m)^```go\\s*$")

func markdownGoBlocks(t *testing.T, path string) []docSample {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []docSample
	text := string(b)
	for _, loc := range fenceRE.FindAllStringIndex(text, -1) {
		rest := text[loc[1]:]
		end := strings.Index(rest, "\n```")
		if end < 0 {
			t.Fatalf("%s: unterminated ```go block", path)
		}
		line := strings.Count(text[:loc[0]], "\n") + 1
		out = append(out, docSample{where: path + ":" + strconv.Itoa(line), text: rest[:end]})
	}
	return out
}

// packageDocGoBlocks returns the code blocks of dir's package comment that
// are Go (tables of metrics, SQL and file layouts are code blocks too).
func packageDocGoBlocks(t *testing.T, dir string) []docSample {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []docSample
	for _, e := range entries {
		name := filepath.Join(dir, e.Name())
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil {
			continue
		}
		var pr comment.Parser
		for _, blk := range pr.Parse(f.Doc.Text()).Content {
			c, ok := blk.(*comment.Code)
			if !ok || !looksLikeGo(c.Text) {
				continue
			}
			out = append(out, docSample{where: name + " (package doc)", text: c.Text})
		}
	}
	return out
}

func looksLikeGo(s string) bool {
	return strings.Contains(s, ":=") || strings.Contains(s, "func ") || strings.Contains(s, "(ctx")
}

// compiledCandidates is every function body and every run of consecutive
// top-level declarations of the module's _test.go files, normalized.
func compiledCandidates(t *testing.T) map[string]string {
	out := map[string]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		// The examples' programs are compiled too, and run by their tests
		// (examples/firstjob by internal/cli's TestNewcomerPath).
		example := strings.HasPrefix(filepath.ToSlash(path), "examples/") && strings.HasSuffix(path, ".go")
		if d.IsDir() || !(strings.HasSuffix(path, "_test.go") || example) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		off := func(p token.Pos) int { return fset.Position(p).Offset }
		start := func(d ast.Decl) token.Pos {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Doc != nil {
				return fd.Doc.Pos()
			}
			if gd, ok := d.(*ast.GenDecl); ok && gd.Doc != nil {
				return gd.Doc.Pos()
			}
			return d.Pos()
		}
		for i, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				body := string(src[off(fd.Body.Lbrace)+1 : off(fd.Body.Rbrace)])
				out[normalizeSample(body)] = path + ": body of " + fd.Name.Name
			}
			for j := i; j < len(f.Decls); j++ {
				out[normalizeSample(string(src[off(start(d)):off(f.Decls[j].End())]))] = path + ": declarations"
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func normalizeSample(s string) string { return strings.Join(strings.Fields(s), " ") }

// closest names the candidate sharing the longest prefix with want, and
// where they part.
func closestCompiled(want string, cands map[string]string) string {
	best, bestN := "", -1
	for c, where := range cands {
		n := 0
		for n < len(c) && n < len(want) && c[n] == want[n] {
			n++
		}
		if n > bestN {
			best, bestN = where, n
		}
	}
	lo := max(0, bestN-40)
	return best + ", differs after «" + want[lo:bestN] + "»"
}
