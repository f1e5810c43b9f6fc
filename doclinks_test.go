package fence_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Pages and comments point at files: a Markdown link to a relative path,
// and a docs/… path named in a comment, a migration or a script. When a
// file moves or is deleted (the benchmark history went to git), every
// pointer to it must move too, or say where the file now is: a path
// followed within its sentence by "in git at <commit>" is history and is
// not looked up.

var (
	mdLinkRE  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	docPathRE = regexp.MustCompile(`\bdocs/[A-Za-z0-9_.{}/-]*[A-Za-z0-9_/-]`)
)

// linkSources are the files whose pointers are checked, by extension.
var linkSources = map[string]bool{".md": true, ".go": true, ".sql": true, ".sh": true, ".py": true}

func TestDocLinksResolve(t *testing.T) {
	var checked int
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !linkSources[filepath.Ext(path)] && filepath.Base(path) != "run" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		if filepath.Ext(path) == ".md" {
			for _, m := range mdLinkRE.FindAllStringSubmatchIndex(text, -1) {
				target := text[m[2]:m[3]]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				checked++
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
					t.Errorf("%s:%d: link to %s, which does not exist", path, lineOf(text, m[0]), target)
				}
			}
		}
		for _, m := range docPathRE.FindAllStringIndex(text, -1) {
			p := strings.TrimRight(text[m[0]:m[1]], "/")
			if strings.ContainsAny(p, "{}") || isHistory(text[m[1]:]) {
				continue
			}
			checked++
			// A name's prefix is enough (docs/adr/0006 for its ADR).
			if found, _ := filepath.Glob(p + "*"); len(found) == 0 {
				t.Errorf("%s:%d: names %s, which does not exist (moved? or say \"in git at <commit>\")", path, lineOf(text, m[0]), p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The test cannot pass by finding nothing to check.
	if checked < 50 {
		t.Fatalf("checked %d links and paths; the extraction is broken", checked)
	}
}

// isHistory reports whether the sentence after a path says the file is in
// git's history: "in git at <commit>" before the sentence ends.
func isHistory(after string) bool {
	if len(after) > 160 {
		after = after[:160]
	}
	after = strings.Join(strings.Fields(strings.ReplaceAll(after, "//", " ")), " ")
	if i := strings.Index(after, ". "); i >= 0 {
		after = after[:i]
	}
	return historyRE.MatchString(after)
}

var historyRE = regexp.MustCompile(`in git at [0-9a-f]{7,40}\b`)

func lineOf(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }
