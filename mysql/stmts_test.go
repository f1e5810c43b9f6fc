package mysql

import (
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

func TestIsPrepareLimit(t *testing.T) {
	limit := &gomysql.MySQLError{Number: erMaxPreparedStmtCount, Message: "Can't create more than max_prepared_stmt_count statements"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{limit, true},
		{fmt.Errorf("exec: %w", limit), true},
		{&gomysql.MySQLError{Number: erLockDeadlock}, false},
		{errors.New("1461"), false},
	} {
		if got := isPrepareLimit(c.err); got != c.want {
			t.Errorf("isPrepareLimit(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
