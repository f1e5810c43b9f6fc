package fence

import (
	"errors"
	"reflect"
	"testing"
)

func TestSplicePositional(t *testing.T) {
	repl := func(int) (string, []any) { return "G(?,?)", []any{"n", "o"} }
	for _, c := range []struct {
		q    string
		args []any
		want string
		out  []any
	}{
		{"UPDATE t SET a = ? WHERE id = ? AND {{fence}}", []any{1, 2}, "UPDATE t SET a = ? WHERE id = ? AND G(?,?)", []any{1, 2, "n", "o"}},
		{"UPDATE t SET a = ? WHERE {{fence}} AND id = ?", []any{1, 2}, "UPDATE t SET a = ? WHERE G(?,?) AND id = ?", []any{1, "n", "o", 2}},
		{"DELETE FROM t WHERE {{fence}}", nil, "DELETE FROM t WHERE G(?,?)", []any{"n", "o"}},
		{"UPDATE t SET a = '?{{fence}}' WHERE {{fence}} AND b = ?", []any{1}, "UPDATE t SET a = '?{{fence}}' WHERE G(?,?) AND b = ?", []any{"n", "o", 1}},
		{"UPDATE t SET a = 'it''s ?' -- ? {{fence}}\n WHERE {{fence}} /* ? */ AND b = ?", []any{1}, "UPDATE t SET a = 'it''s ?' -- ? {{fence}}\n WHERE G(?,?) /* ? */ AND b = ?", []any{"n", "o", 1}},
	} {
		q, out, err := splice(SQLite, c.q, c.args, FenceMarker, 1, repl)
		if err != nil || q != c.want || !reflect.DeepEqual(out, c.out) {
			t.Errorf("%q:\n got %q %v %v\nwant %q %v", c.q, q, out, err, c.want, c.out)
		}
	}
}

func TestSpliceMySQLQuoting(t *testing.T) {
	repl := func(int) (string, []any) { return "G(?)", []any{"x"} }
	q, out, err := splice(MySQL, "UPDATE `t?` SET a = 'a\\'?' # ? {{fence}}\nWHERE {{fence}} AND b = ?", []any{1}, FenceMarker, 1, repl)
	if err != nil || q != "UPDATE `t?` SET a = 'a\\'?' # ? {{fence}}\nWHERE G(?) AND b = ?" || !reflect.DeepEqual(out, []any{"x", 1}) {
		t.Fatalf("%q %v %v", q, out, err)
	}
}

func TestSpliceNumbered(t *testing.T) {
	repl := func(first int) (string, []any) { return "G($" + itoa(first) + ")", []any{"x"} }
	q, out, err := splice(Postgres, "UPDATE t SET a = $1, b = $$?$$ WHERE {{fence}} AND id = $2 AND c = $tag$ $9 $tag$", []any{1, 2}, FenceMarker, 1, repl)
	if err != nil || q != "UPDATE t SET a = $1, b = $$?$$ WHERE G($3) AND id = $2 AND c = $tag$ $9 $tag$" || !reflect.DeepEqual(out, []any{1, 2, "x"}) {
		t.Fatalf("%q %v %v", q, out, err)
	}
	q, out, err = splice(Postgres, "SET f = {{fence_token}} WHERE f <= {{fence_token}} AND id = $1", []any{5}, TokenMarker, -1, repl)
	if err != nil || q != "SET f = G($2) WHERE f <= G($3) AND id = $1" || !reflect.DeepEqual(out, []any{5, "x", "x"}) {
		t.Fatalf("%q %v %v", q, out, err)
	}
}

func TestSpliceErrors(t *testing.T) {
	repl := func(int) (string, []any) { return "G", nil }
	for _, c := range []struct {
		d    Dialect
		q    string
		args []any
	}{
		{SQLite, "UPDATE t SET a = 1", nil},
		{SQLite, "WHERE {{fence}} AND {{fence}}", nil},
		{SQLite, "WHERE a = ? AND {{fence}}", nil},
		{SQLite, "WHERE a = ?1 AND {{fence}}", []any{1}},
		{SQLite, "WHERE a = 'x AND {{fence}}", nil},
		{SQLite, "WHERE /* a AND {{fence}}", nil},
		{Postgres, "WHERE a = $2 AND {{fence}}", []any{1}},
		{Postgres, "WHERE a = $x$ AND {{fence}}", nil},
	} {
		if _, _, err := splice(c.d, c.q, c.args, FenceMarker, 1, repl); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s %q: %v", c.d, c.q, err)
		}
	}
}

func itoa(i int) string { return string(rune('0' + i)) }
