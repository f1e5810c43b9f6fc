package fence

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHeldErrorNamesHolderNotToken(t *testing.T) {
	owner := strings.Repeat("9f2c4e0b", 4) // no HeldError carries one
	for _, c := range []struct {
		e    HeldError
		want string
	}{
		{HeldError{Lease: "admin:reconciliation", Fence: 8, Holder: "web-3:4121", Remaining: 12500 * time.Millisecond},
			`fence: lease "admin:reconciliation" is held by "web-3:4121" (fence 8) for another 12.5s`},
		{HeldError{Lease: "job", Fence: 8, Remaining: time.Second},
			`fence: lease "job" is held by an unnamed holder (fence 8) for another 1s`},
		{HeldError{Lease: "job", Fence: 8, Holder: "evil\x1b[2J\u202e", Remaining: time.Second},
			`fence: lease "job" is held by "evil\x1b[2J\u202e" (fence 8) for another 1s`},
		{HeldError{Lease: "job"}, `fence: lease "job" is held by another owner`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
		if strings.Contains(c.e.Error(), owner[:8]) {
			t.Errorf("%q shows the owner token", c.e.Error())
		}
		if !errors.Is(&c.e, ErrHeld) {
			t.Error("not ErrHeld")
		}
	}
}

func TestValidateHolder(t *testing.T) {
	for _, ok := range []string{"web-1:42", "h", strings.Repeat("x", MaxHolderLen), "wörker 7 (eu-west-1)", "日本:1"} {
		if err := ValidateHolder(ok); err != nil {
			t.Errorf("ValidateHolder(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", MaxHolderLen+1), "a\x00", "a\t", "a\x7f", "a\u0085", "a\u009b", "a\u200b",
		"a\u200d", "a\u202a", "a\u202e", "a\u2066", "a\u2069", "a\ufeff", "a\u061c", "a\u2028", "a\u2029", "a\xff"} {
		err := ValidateHolder(bad)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateHolder(%q) = %v, want ErrInvalid", bad, err)
		} else if strings.ContainsAny(err.Error(), "\x00\x7f\u0085\u202e\u200b") {
			t.Errorf("the error repeats the bad character raw: %q", err)
		}
	}
}

func TestDefaultHolderIsHostPid(t *testing.T) {
	host, err := os.Hostname()
	want := host + ":" + strconv.Itoa(os.Getpid())
	if err != nil {
		want = "pid:" + strconv.Itoa(os.Getpid())
	}
	if got := defaultHolder(); got != want {
		t.Errorf("defaultHolder() = %q, want %q", got, want)
	}
	if _, err := newStore(SQLite, []Option{WithHolder("")}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "WithHolder") {
		t.Errorf("WithHolder(\"\"): %v", err)
	}
	s, err := newStore(SQLite, nil)
	if err != nil || s.Holder() != want {
		t.Errorf("default store holder %q, %v", s.Holder(), err)
	}
}
