package torture

import (
	"strings"
	"testing"
)

// A piece of mariadb-binlog --verbose --base64-output=DECODE-ROWS output as
// MariaDB 10.11 prints it on a Galera node (two transactions; the first also
// changes another table, whose rows must not be taken for events).
const binlogSample = `# at 577
#261204 13:36:59 server id 1  end_log_pos 619 CRC32 0x85f5d6eb 	GTID 1-1-5 trans
/*M!100001 SET @@session.gtid_seq_no=5*//*!*/;
START TRANSACTION
# at 720
#261204 13:36:59 server id 1  end_log_pos 720 CRC32 0xb2af7edf 	Annotate_rows:
#Q> UPDATE x_t_prot SET fence = 7 WHERE lease_name = 'torture-0' /* GTID 9-9-1 */
#261204 13:36:59 server id 1  end_log_pos 826 CRC32 0x437e00bb 	Update_rows: table id 28 flags: STMT_END_F
### UPDATE ` + "`fence`.`x_t_prot`" + `
### WHERE
###   @1='torture-0'
###   @2=6
### SET
###   @1='torture-0'
###   @2=7
### INSERT INTO ` + "`fence`.`x_t_events`" + `
### SET
###   @1='torture-0'
###   @2=6982977794030572
###   @3='stmt'
# Number of rows: 1
COMMIT/*!*/;
#261204 13:36:59 server id 1  end_log_pos 899 CRC32 0x2da44244 	GTID 1-1-6 trans
### INSERT INTO ` + "`fence`.`x_t_events`" + `
### SET
###   @1='torture-1'
###   @2=810745005311354
### INSERT INTO ` + "`fence`.`x_t_events`" + `
### SET
###   @1='torture-0'
###   @2=12
COMMIT/*!*/;
`

func TestBinlogParse(t *testing.T) {
	b := &binlogOrder{insert: "### INSERT INTO `fence`.`x_t_events`", lastGTID: map[uint64]uint64{}, pending: map[string][]int64{}}
	if err := b.parse("binlog.000001", []byte(binlogSample)); err != nil {
		t.Fatal(err)
	}
	if got := b.pending["torture-0"]; len(got) != 2 || got[0] != 6982977794030572 || got[1] != 12 {
		t.Errorf("torture-0: %v, want [6982977794030572 12] (the log's order)", got)
	}
	if got := b.pending["torture-1"]; len(got) != 1 || got[0] != 810745005311354 {
		t.Errorf("torture-1: %v", got)
	}
	if b.txs != 2 || b.events != 3 {
		t.Errorf("txs %d events %d, want 2 and 3", b.txs, b.events)
	}
	// The same transactions again: their GTIDs do not increase, so the log
	// is not in commit order and must not be used.
	err := b.parse("binlog.000001", []byte(binlogSample))
	if err == nil || !strings.Contains(err.Error(), "not in commit order") {
		t.Errorf("a GTID that does not increase: err %v", err)
	}
}
