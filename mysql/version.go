package mysql

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The MariaDB series whose lexer fence's tokenizer is checked against: CI
// runs MariaDB 10.11 (and Galera on 10.11), and the driver needs 10.6's
// statements. MariaDB 11's release notes list no change to comments,
// quoting or number literals; a series after these is refused until it
// has been tested, since each disagreement between two lexers has failed
// open before (issue 27).
const (
	mariadbMinMajor, mariadbMinMinor = 10, 6
	mariadbMaxMajor                  = 11
)

// fencedSQLPolicy says whether fence checks a caller's {{fence}} SQL for
// the server whose VERSION() is v: "" when it does, else why not.
//
// Oracle MySQL is refused: no MySQL server runs where fence is tested, and
// its lexer differs from MariaDB's in ways that decide where SQL hides:
// /*M! … */ is a comment to MySQL and code to MariaDB, /*+ … */ holds
// optimizer hints (SET_VAR among them) on MySQL and is a comment on
// MariaDB, and /*!NNNNNN … */ compares versions that the two number
// differently. Lease operations, InTx and CheckTx do not hand the
// caller's SQL to fence's tokenizer and work on MySQL 8.0.
func fencedSQLPolicy(v string) string {
	base, _, _ := strings.Cut(v, "-")
	parts := strings.SplitN(base, ".", 3)
	var major, minor int
	var err1, err2 error
	if len(parts) >= 2 {
		major, err1 = strconv.Atoi(parts[0])
		minor, err2 = strconv.Atoi(parts[1])
	}
	switch {
	case len(parts) < 2 || err1 != nil || err2 != nil:
		return fmt.Sprintf("the server's version %q is not one fence knows", v)
	case !strings.Contains(strings.ToLower(v), "mariadb"):
		return fmt.Sprintf("{{fence}} statements are refused on MySQL %s: fence's reading of SQL is tested against MariaDB's lexer only, and MySQL's differs "+
			"(/*M! */, /*+ */ hints, /*!NNNNNN */); fence a write with InTx or CheckTx and plain statements instead", base)
	case major < mariadbMinMajor || major == mariadbMinMajor && minor < mariadbMinMinor:
		return fmt.Sprintf("{{fence}} statements need MariaDB %d.%d or later (the server is %s)", mariadbMinMajor, mariadbMinMinor, base)
	case major > mariadbMaxMajor:
		return fmt.Sprintf("{{fence}} statements are refused on MariaDB %s: fence's reading of SQL is tested up to MariaDB %d.x; "+
			"fence a write with InTx or CheckTx and plain statements until a fence release supports it", base, mariadbMaxMajor)
	}
	return ""
}

// FencedSQLRefusal implements driver.ServerChecker.
func (d *Driver) FencedSQLRefusal() error {
	p := d.fencedRefusal.Load()
	if p == nil {
		return errors.New("mysql: the server was not identified (the driver's CheckSession has not run); open the store with fence.New or fence.Open")
	}
	if *p != "" {
		return errors.New("mysql: " + *p)
	}
	return nil
}
