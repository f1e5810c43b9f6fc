package torture

import (
	"context"
	"strings"

	"github.com/fencekit/fence"
)

// Fenced write shapes. Besides the plain single-row UPDATE, the clients'
// fenced single statements (Store.Exec, fencepgx.Exec) use the other shapes
// fence accepts around {{fence}} that users write: a parenthesised OR, a
// DELETE, an INSERT … SELECT (plain and idempotent), a read-only CTE feeding
// an UPDATE, and an UPDATE joined to another table. Each writes the
// protected row exactly once when the token holds the lease, directly or
// through a trigger (schema.go), and stores the token's fence and the op id
// there; the protected row's trigger logs the write with the shape as its
// event kind, so the log checks (check.go) judge every shape alike.
const (
	shapePlain        = "plain"         // UPDATE … WHERE k = ? AND {{fence}}
	shapeOr           = "or"            // UPDATE … WHERE (k = ? OR …) AND {{fence}}
	shapeDelete       = "delete"        // DELETE FROM queue WHERE … AND {{fence}}
	shapeInsert       = "insert-select" // INSERT INTO done SELECT … WHERE … AND {{fence}}
	shapeInsertIgnore = "insert-ignore" // the same, ON CONFLICT DO NOTHING / INSERT IGNORE
	shapeCTE          = "cte"           // WITH t AS (SELECT …) UPDATE … WHERE … AND {{fence}}
	shapeJoin         = "join"          // UPDATE … FROM / UPDATE … JOIN … WHERE … AND {{fence}}
)

// allShapes is the order the clients draw from; the plain UPDATE is drawn
// as often as all the others together, so runs stay comparable with the
// records made before the other shapes existed.
var allShapes = []string{shapeOr, shapeDelete, shapeInsert, shapeInsertIgnore, shapeCTE, shapeJoin}

// writeKinds are the event kinds of writes of the protected row: "stmt"
// (the plain shape) and "tx" (a fenced transaction), then one per shape.
var writeKinds = map[string]bool{"stmt": true, "tx": true, "or": true, "delete": true, "insert": true, "insign": true, "cte": true, "join": true}

func alias(lease string) string { return "n-" + lease }

// shapeStmt is one fenced write of a shape: an optional unfenced statement
// to run first (the DELETE shape queues the item it then consumes), and the
// fenced statement with its arguments (fence appends its own).
type shapeStmt struct {
	pre     string
	preArgs []any
	q       string
	args    []any
}

// shapeSQL returns the statements of shape for a write of op id carrying
// tok's fence to lease name.
func (s schema) shapeSQL(shape string, tok fence.Token, name string, id int64) shapeStmt {
	set := "fence = ?, cnt = cnt + 1, opid = ?, kind = ?"
	switch shape {
	case shapeOr:
		// The right side matches no row (op ids are positive); what matters
		// is that the disjunction is parenthesised, so the fence guards
		// every row either side could match.
		return shapeStmt{q: s.q("UPDATE " + s.prot + " SET " + set + " WHERE (lease_name = ? OR opid < 0) AND {{fence}}"),
			args: []any{tok.Fence, id, "or", name}}
	case shapeDelete:
		return shapeStmt{
			pre:     s.q("INSERT INTO " + s.queue + " (opid, lease_name, fence) VALUES (?, ?, ?)"),
			preArgs: []any{id, name, tok.Fence},
			q:       s.q("DELETE FROM " + s.queue + " WHERE lease_name = ? AND opid = ? AND {{fence}}"),
			args:    []any{name, id}}
	case shapeInsert, shapeInsertIgnore:
		kind := "insert"
		verb, tail := "INSERT INTO ", ""
		if shape == shapeInsertIgnore {
			kind = "insign"
			if s.d == fence.MySQL {
				verb = "INSERT IGNORE INTO "
			} else {
				tail = " ON CONFLICT DO NOTHING"
			}
		}
		return shapeStmt{q: s.q(verb + s.done + " (opid, lease_name, fence, kind) SELECT ?, n.lease_name, ?, ? FROM " + s.names + " AS n WHERE n.alias = ? AND {{fence}}" + tail),
			args: []any{id, tok.Fence, kind, alias(name)}}
	case shapeCTE:
		return shapeStmt{q: s.q("WITH target AS (SELECT lease_name FROM " + s.names + " WHERE alias = ?) UPDATE " + s.prot + " SET " + set +
			" WHERE lease_name IN (SELECT lease_name FROM target) AND {{fence}}"),
			args: []any{alias(name), tok.Fence, id, "cte"}}
	case shapeJoin:
		if s.d == fence.MySQL {
			return shapeStmt{q: "UPDATE " + s.prot + " AS p JOIN " + s.names + " AS n ON n.lease_name = p.lease_name SET p.fence = ?, p.cnt = p.cnt + 1, p.opid = ?, p.kind = ? WHERE n.alias = ? AND {{fence}}",
				args: []any{tok.Fence, id, "join", alias(name)}}
		}
		return shapeStmt{q: s.q("UPDATE " + s.prot + " AS p SET " + set + " FROM " + s.names + " AS n WHERE n.lease_name = p.lease_name AND n.alias = ? AND {{fence}}"),
			args: []any{tok.Fence, id, "join", alias(name)}}
	}
	return shapeStmt{q: s.writeSQL(true), args: []any{tok.Fence, id, "stmt", name}}
}

// probeShapes returns the shapes this server accepts, with the reason for
// each one left out. MariaDB (10.11 at least) has no WITH before UPDATE;
// MySQL 8 has. The probe runs the shape's own syntax on the read-only names
// table, matching no row.
func (s schema) probeShapes(ctx context.Context, e fence.Execer) (shapes []string, skipped map[string]string) {
	skipped = map[string]string{}
	for _, sh := range allShapes {
		if sh == shapeCTE {
			q := s.q("WITH target AS (SELECT lease_name FROM " + s.names + " WHERE alias = ?) UPDATE " + s.names +
				" SET alias = alias WHERE lease_name IN (SELECT lease_name FROM target) AND 1 = 0")
			if _, err := e.ExecContext(ctx, q, "none"); err != nil {
				msg := err.Error()
				if i := strings.Index(msg, "near"); i > 0 {
					msg = msg[:i]
				}
				skipped[sh] = "not supported by this server (WITH before UPDATE: " + strings.TrimSpace(msg) + ")"
				continue
			}
		}
		shapes = append(shapes, sh)
	}
	return shapes, skipped
}
