package sqloracle_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencekit/fence/internal/sqloracle"
	"github.com/fencekit/fence/internal/teststore"
)

// caught is a statement the oracle caught that needs the permissive handle
// (1: PostgreSQL's simple protocol, which runs every statement of the text;
// MySQL's interpolateParams with multiStatements): fencetest's
// OracleCatches keeps the others, which fail on the default handle too. In
// q, {I} and {S} are the oracle's Items and Sink.
type caught struct {
	name    string
	dialect string
	handle  int
	q       string
}

var caughtOnHandles = []caught{
	// PostgreSQL ends a -- comment at a bare carriage return; the simple
	// protocol then runs the second statement behind it, unfenced.
	{"CarriageReturnThenSecondUpdate", "postgres", 1, "DELETE FROM {I} AS a USING {S} AS d WHERE d.id = a.id AND {{fence}} AND 1=1 --\x01\r; UPDATE {I} SET val = 'second'\n"},
	{"CarriageReturnThenSecondInsert", "postgres", 1, "INSERT INTO {S} (id, val, n) SELECT 100, 'x', 1 WHERE {{fence}} AND 1=1 -- ;\r; INSERT INTO {S} (id, val, n) VALUES (99, 'second', 0)\n"},
	{"CarriageReturnAfterMarkerThenSecond", "postgres", 1, "DELETE FROM {I} WHERE {{fence}} --\b\r; UPDATE {I} SET val = 'second'\n"},
}

// TestCaught runs the catches of caughtOnHandles through the oracle: a
// stale owner must change nothing; where fence accepts the statement, the
// holder's run must write.
func TestCaught(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		var cs []caught
		for _, c := range caughtOnHandles {
			if c.dialect == b.Name {
				cs = append(cs, c)
			}
		}
		if len(cs) == 0 {
			t.Skipf("no catch for %s", b.Name)
		}
		ctx := context.Background()
		o, err := sqloracle.Setup(ctx, oracleStores(t, b), t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(context.Background())
		for _, c := range cs {
			t.Run(c.name, func(t *testing.T) {
				q := strings.NewReplacer("{I}", o.Schema.Items, "{S}", o.Schema.Sink).Replace(c.q)
				st := &sqloracle.Stmt{Session: sqloracle.Session{Handle: c.handle}, Pieces: []sqloracle.Piece{{Text: q, Plain: q}}}
				r := o.Check(ctx, st)
				if r.Failed() {
					t.Errorf("%s: %s", sqloracle.Quote(q), r.Why())
				}
				if r.Refused != nil {
					t.Logf("refused: %v", r.Refused)
					return
				}
				if !r.Holder.Changed {
					t.Errorf("holder: %s wrote nothing (%v): an accepted catch must be a real write", sqloracle.Quote(q), r.Holder.Err)
				}
			})
		}
	})
}
