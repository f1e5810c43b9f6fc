package sqloracle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencekit/fence"
)

// Oracle runs generated statements through fence's public API on a real
// server and asks the server what they did: every statement the checker
// accepts runs as a stale owner (a token superseded by a takeover), in a
// transaction that is rolled back, and must change and insert no row; it
// runs as the current owner too, to count the statements that really
// write.
type Oracle struct {
	d      fence.Dialect
	stores []*fence.Store // one per handle, over the same database and tables
	conns  []*sql.Conn
	cur    []string // the settings applied on each connection (Session.String)
	Schema *Schema
	// Stale is superseded by Holder, a takeover of the same lease.
	Stale, Holder fence.Token
	// On the servers: the snapshot (rows logged, rows in Items and Sink)
	// and the read of the change log.
	snapQ     [2]string
	logf      func(format string, args ...any)
	attemptTO time.Duration
}

// Lease is the name of the lease the oracle takes over.
const Lease = "sqloracle"

// Setup creates the oracle's tables (prefix of stores[0] + "items" and
// "sink") with a column per server keyword, probes which spellings of each
// keyword the server takes, the session settings each handle accepts, and
// takes the lease twice so that the first token is stale. stores are
// handles over the same database and table prefix: stores[0] the default
// one, stores[1] (optional) the most permissive configuration fence accepts.
// Close drops the tables.
func Setup(ctx context.Context, stores []*fence.Store, logf func(format string, args ...any)) (*Oracle, error) {
	if len(stores) == 0 {
		return nil, errors.New("sqloracle: no store")
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s := stores[0]
	d := s.Dialect()
	o := &Oracle{d: d, stores: stores, logf: logf, attemptTO: 30 * time.Second}
	kws, err := Keywords(ctx, s.DB(), d)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, k := range kws {
		switch strings.ToLower(k) {
		case "id", "val", "n":
			continue // the base columns (MariaDB lists ID as a keyword)
		}
		if d == fence.Postgres {
			k = strings.ToLower(k) // what an unquoted name folds to
		}
		names = append(names, k)
	}
	sc := &Schema{Dialect: d, Items: s.Prefix() + "items", Sink: s.Prefix() + "sink"}
	if err := o.createTables(ctx, sc, names); err != nil {
		o.dropTables(context.WithoutCancel(ctx), sc)
		return nil, err
	}
	o.Schema = sc
	log := s.Prefix() + "log"
	o.snapQ = [2]string{
		"SELECT (SELECT COUNT(*) FROM " + log + "), (SELECT COUNT(*) FROM " + sc.Items + "), (SELECT COUNT(*) FROM " + sc.Sink + ")",
		"SELECT tbl, op, id FROM " + log + " ORDER BY seq",
	}
	if err := o.probe(ctx, names); err != nil {
		o.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	for _, st := range stores {
		c, err := st.DB().Conn(ctx)
		if err != nil {
			o.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		o.conns = append(o.conns, c)
		o.cur = append(o.cur, "")
	}
	if err := o.probeSessions(ctx); err != nil {
		o.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := o.takeover(ctx); err != nil {
		o.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return o, nil
}

func (o *Oracle) createTables(ctx context.Context, sc *Schema, names []string) error {
	db := o.stores[0].DB()
	var cols strings.Builder
	for _, n := range names {
		cols.WriteString(", " + quoteIdent(o.d, n) + " INT")
	}
	for _, t := range []string{sc.Items, sc.Sink} {
		q := "CREATE TABLE " + t + " (id INT PRIMARY KEY, val VARCHAR(100), n INT" + cols.String() + ")"
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqloracle: creating %s with %d keyword columns: %w", t, len(names), err)
		}
	}
	ins := func(t string, id int, val string, n int) error {
		_, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (id, val, n) VALUES (%d, '%s', %d)", t, id, val, n))
		return err
	}
	for i := 1; i <= 5; i++ {
		if err := ins(sc.Items, i, fmt.Sprintf("v%d", i), i); err != nil {
			return err
		}
	}
	for i := 1; i <= 2; i++ {
		if err := ins(sc.Sink, i, fmt.Sprintf("d%d", i), 0); err != nil {
			return err
		}
	}
	// The keyword columns of rows 1-4 hold the id, so conditions on them
	// are true there; row 5 keeps NULLs.
	var set strings.Builder
	for i, n := range names {
		if i > 0 {
			set.WriteString(", ")
		}
		set.WriteString(quoteIdent(o.d, n) + " = id")
	}
	if len(names) > 0 {
		if _, err := db.ExecContext(ctx, "UPDATE "+sc.Items+" SET "+set.String()+" WHERE id < 5"); err != nil {
			return err
		}
	}
	for _, q := range o.triggerDDL(sc) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqloracle: %s: %w", q, err)
		}
	}
	return nil
}

// triggerDDL creates, on the servers, the change log: a row for every row
// written in Items and Sink (inserted, updated even to the same values,
// deleted), by row triggers, in the writing transaction.
func (o *Oracle) triggerDDL(sc *Schema) []string {
	p := o.stores[0].Prefix()
	log := p + "log"
	switch o.d {
	case fence.Postgres:
		fn := p + "log_row"
		out := []string{
			"CREATE TABLE " + log + " (seq BIGSERIAL PRIMARY KEY, tbl TEXT NOT NULL, op TEXT NOT NULL, id INT)",
			"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN " +
				"INSERT INTO " + log + " (tbl, op, id) VALUES (TG_TABLE_NAME, TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END); " +
				"RETURN NULL; END $f$",
		}
		for _, t := range []string{sc.Items, sc.Sink} {
			out = append(out, "CREATE TRIGGER "+t+"_log AFTER INSERT OR UPDATE OR DELETE ON "+t+" FOR EACH ROW EXECUTE FUNCTION "+fn+"()")
		}
		return out
	case fence.MySQL:
		out := []string{"CREATE TABLE " + log + " (seq BIGINT AUTO_INCREMENT PRIMARY KEY, tbl VARCHAR(64) NOT NULL, op VARCHAR(10) NOT NULL, id INT)"}
		for _, t := range []string{sc.Items, sc.Sink} {
			for _, op := range []string{"INSERT", "UPDATE", "DELETE"} {
				row := "NEW"
				if op == "DELETE" {
					row = "OLD"
				}
				out = append(out, fmt.Sprintf("CREATE TRIGGER %s_%s AFTER %s ON %s FOR EACH ROW INSERT INTO %s (tbl, op, id) VALUES ('%s', '%s', %s.id)",
					t, strings.ToLower(op), op, t, log, t, op, row))
			}
		}
		return out
	}
	return nil
}

func (o *Oracle) dropTables(ctx context.Context, sc *Schema) {
	p := o.stores[0].Prefix()
	qs := []string{"DROP TABLE IF EXISTS " + sc.Items, "DROP TABLE IF EXISTS " + sc.Sink, "DROP TABLE IF EXISTS " + p + "log"}
	if o.d == fence.Postgres {
		qs = append(qs, "DROP FUNCTION IF EXISTS "+p+"log_row()")
	}
	for _, q := range qs {
		if _, err := o.stores[0].DB().ExecContext(ctx, q); err != nil {
			o.logf("sqloracle: %s: %v", q, err)
		}
	}
}

// probe asks the server, for each keyword column, which spellings it
// accepts where (statements that match no row).
func (o *Oracle) probe(ctx context.Context, names []string) error {
	db := o.stores[0].DB()
	t := o.Schema.Items
	ok := func(q string) bool {
		_, err := db.ExecContext(ctx, q)
		return err == nil
	}
	var n [4]int
	for _, name := range names {
		c := Column{
			Name:      name,
			Bare:      ok("SELECT " + name + " FROM " + t + " WHERE 1=0"),
			Qualified: ok("SELECT t." + name + " FROM " + t + " AS t WHERE 1=0"),
			SetBare:   ok("UPDATE " + t + " SET " + name + " = 1 WHERE 1=0"),
			Alias:     ok("SELECT " + name + ".id FROM " + t + " AS " + name + " WHERE 1=0"),
		}
		for i, b := range []bool{c.Bare, c.Qualified, c.SetBare, c.Alias} {
			if b {
				n[i]++
			}
		}
		o.Schema.Cols = append(o.Schema.Cols, c)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	o.logf("%s: %d keywords from the server as columns; the server takes %d bare, %d qualified, %d as bare SET targets, %d as bare aliases",
		o.d, len(names), n[0], n[1], n[2], n[3])
	return nil
}

// probeSessions finds, per handle, the session settings it can run with.
func (o *Oracle) probeSessions(ctx context.Context) error {
	vals := settingValues(o.d)
	o.Schema.Options = make([]map[string][]string, len(o.conns))
	for h := range o.conns {
		opts := map[string][]string{}
		for _, name := range sortedKeys(vals) {
			cur, err := o.current(ctx, h, name)
			if err != nil {
				return err
			}
			opts[name] = []string{cur}
			var refused []string
			for _, v := range vals[name] {
				if v == cur {
					continue
				}
				err := o.trySetting(ctx, h, Setting{name, v})
				if err2 := o.apply(ctx, h, Setting{name, cur}); err2 != nil {
					return err2
				}
				if err != nil {
					refused = append(refused, v+" ("+short(err)+")")
					continue
				}
				opts[name] = append(opts[name], v)
			}
			if len(refused) > 0 {
				o.logf("%s handle %d: %s values left out: %s", o.d, h, name, strings.Join(refused, "; "))
			}
		}
		o.Schema.Options[h] = opts
		o.cur[h] = ""
	}
	return nil
}

func (o *Oracle) current(ctx context.Context, h int, name string) (string, error) {
	q := "SHOW " + name
	if o.d == fence.MySQL {
		q = "SELECT @@SESSION." + name
		if name == "names" {
			q = "SELECT @@SESSION.character_set_client"
		}
	}
	var v string
	err := o.conns[h].QueryRowContext(ctx, q).Scan(&v)
	return v, err
}

// trySetting sets x on handle h and runs a query and a fenced no-op write
// there; a broken connection is replaced.
func (o *Oracle) trySetting(ctx context.Context, h int, x Setting) error {
	if err := o.apply(ctx, h, x); err != nil {
		return err
	}
	var one string
	if err := o.conns[h].QueryRowContext(ctx, "SELECT 'x'").Scan(&one); err != nil {
		return err
	}
	return nil
}

// apply runs the SET of x on handle h's connection, replacing the
// connection if it broke.
func (o *Oracle) apply(ctx context.Context, h int, x Setting) error {
	_, err := o.conns[h].ExecContext(ctx, setSQL(o.d, x))
	if err != nil && (errors.Is(err, sql.ErrConnDone) || errors.Is(err, driverBadConn)) {
		o.reconnect(ctx, h)
	}
	return err
}

func (o *Oracle) reconnect(ctx context.Context, h int) {
	o.conns[h].Close()
	c, err := o.stores[h].DB().Conn(ctx)
	if err != nil {
		o.logf("sqloracle: reconnect handle %d: %v", h, err)
		return
	}
	o.conns[h] = c
	o.cur[h] = ""
}

func (o *Oracle) takeover(ctx context.Context) error {
	s := o.stores[0]
	ttl := 24 * time.Hour
	l, err := s.Acquire(ctx, Lease, ttl)
	if err != nil {
		return fmt.Errorf("sqloracle: acquire: %w", err)
	}
	o.Stale = l.Token
	if _, err := s.Revoke(ctx, Lease); err != nil {
		return fmt.Errorf("sqloracle: revoke: %w", err)
	}
	l, err = s.Acquire(ctx, Lease, ttl)
	if err != nil {
		return fmt.Errorf("sqloracle: acquire after the revoke: %w", err)
	}
	o.Holder = l.Token
	if o.Holder.Fence <= o.Stale.Fence {
		return fmt.Errorf("sqloracle: takeover fence %d is not above %d", o.Holder.Fence, o.Stale.Fence)
	}
	return nil
}

// Close resets the connections and drops the oracle's tables.
func (o *Oracle) Close(ctx context.Context) {
	for _, c := range o.conns {
		c.Raw(func(any) error { return driverBadConn }) // never reuse a connection with changed settings
		c.Close()
	}
	o.conns = nil
	if o.Schema != nil {
		o.dropTables(ctx, o.Schema)
	}
}

// session applies s's settings on its handle's connection, if they are not
// the ones already there.
func (o *Oracle) session(ctx context.Context, s Session) (*sql.Conn, error) {
	h := s.Handle
	key := s.String()
	if o.cur[h] != key {
		for _, x := range s.Settings {
			if err := o.apply(ctx, h, x); err != nil {
				o.cur[h] = ""
				return nil, fmt.Errorf("session %s: %w", key, err)
			}
		}
		o.cur[h] = key
	}
	return o.conns[h], nil
}
