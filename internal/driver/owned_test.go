package driver

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"testing"
	"time"
)

type nopConnector struct{}

func (nopConnector) Connect(context.Context) (sqldriver.Conn, error) {
	return nil, sqldriver.ErrBadConn
}
func (nopConnector) Driver() sqldriver.Driver { return nil }

// A store bounds and closes only a handle its driver opened; a caller's
// handle keeps its own pool settings and stays open.
func TestOwnedHandle(t *testing.T) {
	for _, owned := range []bool{false, true} {
		db := sql.OpenDB(nopConnector{})
		LimitOwned(db, owned, 3, time.Minute, time.Minute)
		want := 0 // unlimited
		if owned {
			want = 3
		}
		if got := db.Stats().MaxOpenConnections; got != want {
			t.Errorf("owned %v: max open %d, want %d", owned, got, want)
		}
		if err := CloseOwned(db, owned); err != nil {
			t.Fatal(err)
		}
		// A closed DB answers "sql: database is closed".
		err := db.PingContext(context.Background())
		if closed := err != nil && err.Error() == "sql: database is closed"; closed != owned {
			t.Errorf("owned %v: closed %v (%v)", owned, closed, err)
		}
		db.Close()
	}
	if err := CloseOwned(nil, true); err != nil {
		t.Errorf("nil handle: %v", err)
	}
}
