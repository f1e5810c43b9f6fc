package fence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// twoStatements is a driver whose server's lexer sees a second statement
// in every text: the stand-in for a text where fence's tokenizer and
// SQLite's disagree on where a statement ends.
type twoStatements struct{ driver.Driver }

var errServerSeesTwo = errors.New("the server reads two statements here")

func (twoStatements) CheckOneStatement(string) error { return errServerSeesTwo }

// The server's verdict on the text sent wins over fence's tokenizer: a
// fenced write the driver's lexer reads as two statements is refused before
// anything is sent, and nothing is written.
func TestServerLexerDecidesOneStatement(t *testing.T) {
	ctx := context.Background()
	s := migratedSQLite(t)
	l, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token
	if _, err := s.db.ExecContext(ctx, "CREATE TABLE w (id INTEGER PRIMARY KEY, v TEXT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, "INSERT INTO w VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	q := "UPDATE w SET v = 'b' WHERE id = 1 AND {{fence}}"
	if n, err := s.Exec(ctx, tok, q); err != nil || n != 1 {
		t.Fatalf("plain driver: n=%d err=%v", n, err)
	}
	s.drv = twoStatements{s.drv}
	n, err := s.Exec(ctx, tok, "UPDATE w SET v = 'c' WHERE id = 1 AND {{fence}}")
	if !errors.Is(err, ErrInvalid) || n != 0 {
		t.Fatalf("want ErrInvalid from the server's lexer, got n=%d err=%v", n, err)
	}
	var v string
	if err := s.db.QueryRowContext(ctx, "SELECT v FROM w WHERE id = 1").Scan(&v); err != nil || v != "b" {
		t.Fatalf("row: %q %v", v, err)
	}
	if _, _, err := s.Fenced(tok, q); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Fenced: %v", err)
	}
}
