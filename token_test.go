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

// The key names the effect, not the owner: a newer generation retrying a
// step sends the key the older one sent (before issue 30 the fence was part
// of the key, and the retry ran the effect twice).
func TestIdempotencyKey(t *testing.T) {
	a := Token{Lease: "task:1", Owner: strings.Repeat("a", 32), Fence: 3}
	b := a
	b.Owner = strings.Repeat("b", 32)
	c := a
	c.Fence = 4
	if IdempotencyKey(a, "step-1") != IdempotencyKey(b, "step-1") || IdempotencyKey(a, "step-1") != IdempotencyKey(c, "step-1") {
		t.Fatal("key must depend on lease and parts only, not on owner or fence")
	}
	d := a
	d.Lease = "task:2"
	for _, k := range []string{IdempotencyKey(d, "step-1"), IdempotencyKey(a, "step-2"), IdempotencyKey(a, "step", "-1"), IdempotencyKey(a)} {
		if k == IdempotencyKey(a, "step-1") || len(k) != 32 {
			t.Fatalf("key collision or length: %q", k)
		}
	}
}

func TestRebind(t *testing.T) {
	got := Rebind(Postgres, "UPDATE t SET a = ?, b = '?' WHERE c = ? -- ?\n AND d = $$?$$")
	if got != "UPDATE t SET a = $1, b = '?' WHERE c = $2 -- ?\n AND d = $$?$$" {
		t.Fatalf("%q", got)
	}
	if Rebind(MySQL, "a = ?") != "a = ?" {
		t.Fatal("mysql changed")
	}
}

// Short names the lease and the fence, and only a prefix of the owner: it
// used to return the owner prefix alone, which said nothing in a log.
func TestTokenShort(t *testing.T) {
	tok := Token{Lease: "admin:reconciliation", Fence: 1796343098170000, Owner: "0123456789abcdef0123456789abcdef"}
	if got, want := tok.Short(), "admin:reconciliation#1796343098170000@01234567"; got != want {
		t.Errorf("Short() = %q, want %q", got, want)
	}
	if strings.Contains(tok.Short(), tok.Owner[8:]) {
		t.Errorf("Short() %q shows more than 8 digits of the owner", tok.Short())
	}
}

// A schema-qualified prefix is refused with the way that works: a prefix is
// part of each table name, and PostgreSQL's search_path picks the schema.
func TestDottedPrefixPointsToSearchPath(t *testing.T) {
	err := ValidatePrefix("app.fence_")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "search_path=app") {
		t.Errorf("ValidatePrefix(\"app.fence_\") = %v, want ErrInvalid naming search_path=app", err)
	}
	if err := ValidatePrefix("fence_"); err != nil {
		t.Errorf("ValidatePrefix(\"fence_\") = %v", err)
	}
}
