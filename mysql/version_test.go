package mysql

import (
	"context"
	"strings"
	"testing"
)

func TestFencedSQLPolicy(t *testing.T) {
	for _, c := range []struct{ version, refusal string }{
		{"10.11.6-MariaDB-0+deb12u1", ""},
		{"10.6.16-MariaDB-log", ""},
		{"11.4.2-MariaDB", ""},
		{"10.5.23-MariaDB", "need MariaDB 10.6"},
		{"12.0.1-MariaDB", "tested up to MariaDB 11"},
		{"8.0.36", "refused on MySQL 8.0.36"},
		{"8.4.0-commercial", "refused on MySQL 8.4.0"},
		{"garbage", "not one fence knows"},
	} {
		got := fencedSQLPolicy(c.version)
		if c.refusal == "" && got != "" || c.refusal != "" && !strings.Contains(got, c.refusal) {
			t.Errorf("%q: %q, want %q", c.version, got, c.refusal)
		}
	}
}

// TestLexingThatDiffersFromMySQL asks this server how it reads the comment
// forms in which MariaDB and MySQL 8 differ, and checks that fence's
// tokenizer refuses the ones that carry SQL on either server. MariaDB runs
// the body of /*M! */ (MySQL skips it); of /*!NNNNN */ it runs 50100 and
// 100500 but skips 50700 and 80000 (measured on 10.11: a five-digit
// version is a MySQL one, compared with the 5.5 MariaDB claims to be,
// while MySQL 8 runs both bodies); and it skips /*+ */ (MySQL reads
// optimizer hints in it). fence refuses /*! and /*M! on the MySQL
// dialect (sqlrewrite_test) and refuses every {{fence}} statement on MySQL
// itself (fencedSQLPolicy).
func TestLexingThatDiffersFromMySQL(t *testing.T) {
	db := openDB(t, viaOpen)
	ctx := context.Background()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if p := fencedSQLPolicy(version); p != "" {
		t.Fatalf("the tested server %s is refused: %s", version, p)
	}
	for _, c := range []struct {
		q    string
		want int64
	}{
		{"SELECT 1 /*M! + 1 */", 2},
		{"SELECT 1 /*! + 1 */", 2},
		{"SELECT 1 /*!50100 + 1 */", 2},
		{"SELECT 1 /*!50700 + 1 */", 1},
		{"SELECT 1 /*!80000 + 1 */", 1},
		{"SELECT 1 /*!100500 + 1 */", 2},
		{"SELECT 1 /*!999999 + 1 */", 1},
		{"SELECT 1 /*+ + 1 */", 1},
	} {
		var n int64
		if err := db.QueryRowContext(ctx, c.q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		if n != c.want {
			t.Errorf("%s on %s: %d, want %d", c.q, version, n, c.want)
		}
	}
}
