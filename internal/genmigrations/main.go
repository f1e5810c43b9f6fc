// Command genmigrations writes fence's schema as files for other migration
// tools: goose (goose/<dialect>/NNNN_name.sql) and golang-migrate
// (golang-migrate/<dialect>/NNNN_name.up.sql and .down.sql) for sqlite,
// postgres and mysql, rendered from the migrations embedded in those
// packages, the same SQL that Store.Migrate runs.
//
// Each Up also creates and fills fence's own version table
// (<prefix>schema), so that Store.SchemaVersion agrees with the tool and
// `fence migrate` afterwards has nothing to do; each Down drops the tables
// its Up created, in reverse order.
//
//	go generate ./migrations                 # rewrite the committed files
//	go run ./internal/genmigrations -prefix app_fence_ -out /tmp/fence-migrations
//
// -out defaults to the module's migrations directory; -prefix to fence_.
// A test in this package fails when the committed files are stale.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fencekit/fence"
)

func main() {
	out := flag.String("out", "", "output `directory` (default: the module's migrations directory)")
	prefix := flag.String("prefix", fence.DefaultPrefix, "table `prefix`")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "genmigrations: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := run(*out, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "genmigrations:", err)
		os.Exit(1)
	}
}

func run(out, prefix string) error {
	if err := fence.ValidatePrefix(prefix); err != nil {
		return err
	}
	if out == "" {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		out = filepath.Join(root, "migrations")
	}
	files, err := render(prefix)
	if err != nil {
		return err
	}
	return write(out, files)
}

// moduleRoot finds fence's go.mod above the working directory (go generate
// runs in migrations/, go run wherever it is typed).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/fencekit/fence\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/fencekit/fence module; pass -out")
		}
		dir = parent
	}
}

// tools are the directories under out that genmigrations owns.
var tools = []string{"goose", "golang-migrate"}

// write makes out/goose and out/golang-migrate hold exactly files: it writes
// the files whose content changed and removes .sql files it did not render.
func write(out string, files map[string][]byte) error {
	have, err := listSQL(out)
	if err != nil {
		return err
	}
	for _, p := range have {
		if _, ok := files[p]; !ok {
			if err := os.Remove(filepath.Join(out, filepath.FromSlash(p))); err != nil {
				return err
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		dst := filepath.Join(out, filepath.FromSlash(p))
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, files[p]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, files[p], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// listSQL returns the .sql files under out/goose and out/golang-migrate, as
// slash-separated paths relative to out.
func listSQL(out string) ([]string, error) {
	var ps []string
	for _, t := range tools {
		root := filepath.Join(out, t)
		err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return fs.SkipDir
			}
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".sql") {
				return err
			}
			rel, err := filepath.Rel(out, p)
			ps = append(ps, filepath.ToSlash(rel))
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(ps)
	return ps, nil
}
