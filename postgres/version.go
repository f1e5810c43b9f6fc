package postgres

import (
	"errors"
	"fmt"
)

// The PostgreSQL majors whose lexer fence's tokenizer is checked against.
// CI runs 15. The lexer changes the release notes of 13 to 18 list are all
// in number literals, spellings fence refuses on every version (a number
// glued to a word): 15 made junk after a number an error where 14 read
// "1.0OR" as "1.0 OR"; 16 reads 0x1F, 0o17, 0b101 and 1_000 as numbers
// where 15 refuses them (measured) and 14 reads "0x1F" as 0 followed by
// the name x1F. TestLexingByVersion
// shows this server's reading of each and fence's refusal. A major outside
// the range is refused until it has been tested: each disagreement between
// two lexers has failed open before (issue 27).
const (
	minMajor = 13
	maxMajor = 18
)

// fencedSQLPolicy says whether fence checks a caller's {{fence}} SQL on a
// server whose server_version_num is v: "" when it does, else why not.
func fencedSQLPolicy(v int) string {
	major := v / 10000
	switch {
	case v < 100000:
		return fmt.Sprintf("{{fence}} statements need PostgreSQL %d or later (server_version_num %d)", minMajor, v)
	case major < minMajor:
		return fmt.Sprintf("{{fence}} statements need PostgreSQL %d or later (the server is %d)", minMajor, major)
	case major > maxMajor:
		return fmt.Sprintf("{{fence}} statements are refused on PostgreSQL %d: fence's reading of SQL is tested up to PostgreSQL %d; "+
			"fence a write with InTx or CheckTx and plain statements until a fence release supports it", major, maxMajor)
	}
	return ""
}

// FencedSQLRefusal implements driver.ServerChecker.
func (d *Driver) FencedSQLRefusal() error {
	p := d.fencedRefusal.Load()
	if p == nil {
		return errors.New("postgres: the server was not identified (the driver's CheckSession has not run); open the store with fence.New or fence.Open")
	}
	if *p != "" {
		return errors.New("postgres: " + *p)
	}
	return nil
}
