package fence_test

import (
	osexec "os/exec"
	"strings"
	"testing"
)

// The root package links no database driver, and a program that imports
// one driver package links that driver only: a PostgreSQL-only program
// carried modernc SQLite (6 MB) and go-sql-driver/mysql, and registered
// their database/sql drivers, when the root package opened every dialect.
func TestImportLinksOnlyTheChosenDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	deps := func(pkg string) map[string]bool {
		t.Helper()
		out, err := osexec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		m := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			m[p] = true
		}
		return m
	}
	sqlite, mysql, pgx := "modernc.org/sqlite", "github.com/go-sql-driver/mysql", "github.com/jackc/pgx/v5"
	for pkg, want := range map[string]map[string]bool{
		"github.com/fencekit/fence":                 {sqlite: false, mysql: false, pgx: false},
		"github.com/fencekit/fence/examples/pgonly": {sqlite: false, mysql: false, pgx: true},
		"github.com/fencekit/fence/mysql":           {sqlite: false, mysql: true, pgx: false},
		"github.com/fencekit/fence/sqlite":          {sqlite: true, mysql: false, pgx: false},
		"github.com/fencekit/fence/fencedsn":        {sqlite: true, mysql: true, pgx: true},
		"github.com/fencekit/fence/fenceprom":       {sqlite: false, mysql: false, pgx: false},
		"github.com/fencekit/fence/fencegocron":     {sqlite: false, mysql: false, pgx: false},
		"github.com/fencekit/fence/fencehttp":       {sqlite: false, mysql: false, pgx: false},
		"github.com/fencekit/fence/cmd/fence":       {sqlite: true, mysql: true, pgx: true},
		"github.com/fencekit/fence/internal/cli":    {sqlite: true, mysql: true, pgx: true},
	} {
		d := deps(pkg)
		for dep, linked := range want {
			if d[dep] != linked {
				t.Errorf("%s links %s: %v, want %v", pkg, dep, d[dep], linked)
			}
		}
		for p := range d {
			if strings.HasPrefix(p, "github.com/redis/go-redis") {
				t.Errorf("%s links %s: only the benchmark's peers module may", pkg, p)
			}
		}
	}
}
