package fence

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	owner, err := newOwner()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"admin:reconciliation", "a#b@c", "@", "#", "tenant/42#7@x", "日本"} {
		tk := Token{Lease: name, Owner: owner, Fence: 7}
		got, err := ParseToken(tk.String())
		if err != nil || got != tk {
			t.Fatalf("%q: %+v %v", tk, got, err)
		}
		b, err := json.Marshal(struct{ T Token }{tk})
		if err != nil {
			t.Fatal(err)
		}
		var back struct{ T Token }
		if err := json.Unmarshal(b, &back); err != nil || back.T != tk {
			t.Fatalf("json %s: %+v %v", b, back, err)
		}
	}
}

func TestParseTokenErrors(t *testing.T) {
	owner := strings.Repeat("ab", 16)
	for _, s := range []string{
		"", "job", "job#7", "job@" + owner, "job#0@" + owner, "job#-1@" + owner, "job#+1@" + owner,
		"job#07@" + owner, "job#x@" + owner, "job#99999999999999999999@" + owner,
		"job#1@" + strings.ToUpper(owner), "job#1@short", "#1@" + owner, "a\x00b#1@" + owner,
	} {
		_, err := ParseToken(s)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseToken(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

func TestOwnersAreRandom(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		o, err := newOwner()
		if err != nil || validateOwner(o) != nil || seen[o] {
			t.Fatalf("owner %q: %v", o, err)
		}
		seen[o] = true
	}
}
