package sqlite

import "testing"

// CheckOneStatement is SQLite's own tokenizer's verdict: the cases where a
// tokenizer written from the manual could misjudge the end of a statement.
func TestCheckOneStatement(t *testing.T) {
	var d Driver
	for _, c := range []struct {
		q   string
		one bool
	}{
		{"UPDATE t SET a = 1 WHERE id = 2", true},
		{"UPDATE t SET a = 1 WHERE id = 2;", true},
		{"UPDATE t SET a = 1 WHERE id = 2 ; -- done", true},
		{"UPDATE t SET a = 1 WHERE id = 2; /* done */ ;; ", true},
		{"UPDATE t SET a = ';' WHERE id = 2", true},
		{`UPDATE t SET "a;b" = 1 WHERE [c;d] = 2 AND ` + "`e;f`" + ` = 3`, true},
		{"UPDATE t SET a = 1 -- ; DELETE FROM t\n WHERE id = 2", true},
		{"UPDATE t SET a = 1 /* ; DELETE FROM t */ WHERE id = 2", true},
		{"UPDATE t SET a = 1; DELETE FROM t", false},
		{"UPDATE t SET a = 1; DELETE FROM t;", false},
		{"UPDATE t SET a = 1;;DELETE FROM t", false},
		{"UPDATE t SET a = 1; -- c\n DELETE FROM t", false},
		{"UPDATE t SET a = 'x'';'; DELETE FROM t", false},
		{"UPDATE t SET a = 1 WHERE b = x'3b'; DELETE FROM t", false},
	} {
		err := d.CheckOneStatement(c.q)
		if (err == nil) != c.one {
			t.Errorf("%q: %v (want one statement: %v)", c.q, err, c.one)
		}
	}
}
