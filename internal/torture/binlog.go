package torture

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// On a MariaDB Galera cluster the event log cannot be numbered by the
// per-lease clock row (schema.go): that row is written by every lease change
// and every protected write, so a stale write and the takeover it races
// would both write it, and Galera's certification would refuse the stale
// write for that reason alone, whatever the guard: a broken guard would
// pass. There the triggers give each event a random key instead (no shared
// row), and the order comes from the cluster itself. Every node commits in
// the cluster's total order (Galera's repl.commit_order default: no
// out-of-order commits), and with log_bin and log_slave_updates a node's
// binary log lists every transaction of the cluster, its own and the write
// sets it applied, in that order. The harness reads the admin node's
// binary log with mariadb-binlog at each barrier and numbers each lease's
// events by their position in it.
//
// The binlog reader checks what it relies on: with wsrep GTID mode (which
// clusters/galera/galera.sh turns on) the GTID sequence numbers of the
// cluster's domain strictly increase along the log; a log that says
// otherwise fails the run.

// binlogOrder reads one server's binary log from a cursor on.
type binlogOrder struct {
	bin    string // the mariadb-binlog (or mysqlbinlog) executable
	args   []string
	pass   string
	insert string // the "### INSERT INTO `db`.`table`" line of the events table
	file   string // next unread position
	pos    int64
	// lastGTID is the last GTID sequence number seen per domain.
	lastGTID map[uint64]uint64
	// pending holds, per lease, the keys of events read from the log and
	// not yet taken by the barrier, in commit order.
	pending map[string][]int64
	// txs counts the transactions read; events the events.
	txs, events int64
}

// galeraBinlog reports whether db's server is a Galera node whose binary
// log holds every transaction of the cluster (log_bin, log_slave_updates),
// and whether it is a Galera node at all.
func galeraBinlog(ctx context.Context, db *sql.DB) (galera, binlog bool, err error) {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'log_bin', 'log_slave_updates')")
	if err != nil {
		return false, false, err
	}
	defer rows.Close()
	v := map[string]bool{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return false, false, err
		}
		v[strings.ToLower(name)] = strings.EqualFold(value, "ON") || value == "1"
	}
	if err := rows.Err(); err != nil {
		return false, false, err
	}
	return v["wsrep_on"], v["wsrep_on"] && v["log_bin"] && v["log_slave_updates"], nil
}

// newBinlogOrder prepares a reader of the binary log of the server dsn
// names, starting at its current end (the events table is new and empty).
func newBinlogOrder(ctx context.Context, db *sql.DB, dsn, table string) (*binlogOrder, error) {
	bin, err := exec.LookPath("mariadb-binlog")
	if err != nil {
		if bin, err = exec.LookPath("mysqlbinlog"); err != nil {
			return nil, errors.New("torture: the Galera commit order reads the binary log with mariadb-binlog, which is not installed (Debian: mariadb-client)")
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = "3306"
	}
	b := &binlogOrder{bin: bin, lastGTID: map[uint64]uint64{}, pending: map[string][]int64{}}
	b.args = []string{"--no-defaults", "--read-from-remote-server", "--host=" + u.Hostname(), "--port=" + port,
		"--user=" + u.User.Username(), "--base64-output=DECODE-ROWS", "--verbose"}
	b.pass, _ = u.User.Password()
	var dbName string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&dbName); err != nil {
		return nil, err
	}
	b.insert = "### INSERT INTO `" + dbName + "`.`" + table + "`"
	if b.file, b.pos, err = masterStatus(ctx, db); err != nil {
		return nil, err
	}
	return b, nil
}

// masterStatus returns the end of the server's binary log. The SELECT
// before it waits (wsrep_sync_wait) until the node has applied every write
// set the cluster committed before it was sent, so the log then holds all
// of them: a binlog event is written before the engine commit it records.
func masterStatus(ctx context.Context, db *sql.DB) (string, int64, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", 0, err
	}
	defer conn.Close()
	var one int
	if err := conn.QueryRowContext(ctx, "SET STATEMENT wsrep_sync_wait = 1 FOR SELECT 1").Scan(&one); err != nil {
		return "", 0, fmt.Errorf("torture: waiting for the admin node to catch up with the cluster: %w", err)
	}
	rows, err := conn.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		return "", 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", 0, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", 0, err
		}
		return "", 0, errors.New("torture: SHOW MASTER STATUS returned nothing: the binary log is off")
	}
	vals := make([]any, len(cols))
	var file string
	var pos int64
	vals[0], vals[1] = &file, &pos
	for i := 2; i < len(vals); i++ {
		vals[i] = new(sql.RawBytes)
	}
	if err := rows.Scan(vals...); err != nil {
		return "", 0, err
	}
	return file, pos, rows.Err()
}

// read reads the log from the cursor to its end and adds the events table's
// inserts to pending.
func (b *binlogOrder) read(ctx context.Context, db *sql.DB) error {
	endFile, endPos, err := masterStatus(ctx, db)
	if err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return err
	}
	type logFile struct {
		name string
		size int64
	}
	var files []logFile
	for rows.Next() {
		cols, _ := rows.Columns()
		var f logFile
		vals := []any{&f.name, &f.size}
		for i := 2; i < len(cols); i++ {
			vals = append(vals, new(sql.RawBytes))
		}
		if err := rows.Scan(vals...); err != nil {
			rows.Close()
			return err
		}
		files = append(files, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	started := false
	for _, f := range files {
		if f.name == b.file {
			started = true
		}
		if !started {
			continue
		}
		start, stop := int64(4), f.size
		if f.name == b.file {
			start = b.pos
		}
		if f.name == endFile {
			stop = endPos
		}
		if start < stop {
			if err := b.readFile(ctx, f.name, start, stop); err != nil {
				return err
			}
		}
		b.file, b.pos = f.name, stop
		if f.name == endFile {
			break
		}
	}
	if !started {
		return fmt.Errorf("torture: binary log %s is gone (purged?): the commit order is lost", b.file)
	}
	return nil
}

var gtidRE = regexp.MustCompile(`\bGTID (\d+)-(\d+)-(\d+)\b`)

// readFile runs mariadb-binlog on one log file between two positions and
// parses its verbose output: a "GTID d-s-n" header per transaction, and per
// row inserted into the events table
//
//	### INSERT INTO `db`.`table`
//	### SET
//	###   @1='lease name'
//	###   @2=key
//	…
func (b *binlogOrder) readFile(ctx context.Context, file string, start, stop int64) error {
	args := append(append([]string{}, b.args...), "--start-position="+strconv.FormatInt(start, 10), "--stop-position="+strconv.FormatInt(stop, 10), file)
	cmd := exec.CommandContext(ctx, b.bin, args...)
	cmd.Env = append(os.Environ(), "MYSQL_PWD="+b.pass)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("torture: %s %s (%d–%d): %w: %s", b.bin, file, start, stop, err, strings.TrimSpace(stderr.String()))
	}
	return b.parse(file, out)
}

// parse reads mariadb-binlog's verbose output (readFile).
func (b *binlogOrder) parse(file string, out []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	in := false // inside an insert into the events table
	var lease string
	var haveLease bool
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "###") {
			// "#Q>" lines are the statements' text (Annotate_rows).
			if m := gtidRE.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "#Q>") && strings.Contains(line, " end_log_pos ") {
				d, _ := strconv.ParseUint(m[1], 10, 64)
				n, _ := strconv.ParseUint(m[3], 10, 64)
				if last, ok := b.lastGTID[d]; ok && n <= last {
					return fmt.Errorf("torture: binary log %s: GTID %s follows sequence number %d of domain %d: the log is not in commit order, so the event log cannot be ordered by it", file, m[0][5:], last, d)
				}
				b.lastGTID[d] = n
				b.txs++
			}
			continue
		}
		if !strings.HasPrefix(line, "###") {
			continue
		}
		if strings.HasPrefix(line, "### INSERT INTO ") || strings.HasPrefix(line, "### UPDATE ") || strings.HasPrefix(line, "### DELETE FROM ") {
			in = line == b.insert
			haveLease = false
			continue
		}
		if !in {
			continue
		}
		v, ok := strings.CutPrefix(line, "###   @1=")
		if ok {
			lease, haveLease = strings.Trim(v, "'"), true
			continue
		}
		if v, ok = strings.CutPrefix(line, "###   @2="); ok && haveLease {
			if i := strings.IndexByte(v, ' '); i >= 0 {
				v = v[:i]
			}
			key, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("torture: binary log %s: event key %q: %w", file, v, err)
			}
			b.pending[lease] = append(b.pending[lease], key)
			b.events++
			in, haveLease = false, false
		}
	}
	return sc.Err()
}

// events reads lease's pending events from the table, in the log's order,
// numbered from seq+1 on. The barrier drops them from pending (take) once
// its reads have all succeeded.
func (b *binlogOrder) eventsOf(ctx context.Context, s schema, db *sql.DB, lease string, seq int64) ([]event, error) {
	keys := b.pending[lease]
	byKey := map[int64]event{}
	for i := 0; i < len(keys); i += 500 {
		chunk := keys[i:min(i+500, len(keys))]
		args := []any{lease}
		for _, k := range chunk {
			args = append(args, k)
		}
		q := "SELECT lease_name, seq, kind, fence, owner, until_ms, at_ms, opid FROM " + s.events +
			" WHERE lease_name = ? AND seq IN (?" + strings.Repeat(", ?", len(chunk)-1) + ")"
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var e event
			if err := rows.Scan(&e.Lease, &e.Seq, &e.Kind, &e.Fence, &e.Owner, &e.UntilMs, &e.AtMs, &e.OpID); err != nil {
				rows.Close()
				return nil, err
			}
			byKey[e.Seq] = e
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]event, 0, len(keys))
	for i, k := range keys {
		e, ok := byKey[k]
		if !ok {
			return nil, fmt.Errorf("torture: event %d of lease %s is in the binary log but not in %s", k, lease, s.events)
		}
		e.Seq = seq + int64(i) + 1
		out = append(out, e)
	}
	return out, nil
}

// take drops lease's pending events, which the barrier has checked.
func (b *binlogOrder) take(lease string) { delete(b.pending, lease) }
