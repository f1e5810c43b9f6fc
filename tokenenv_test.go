package fence

import (
	"errors"
	"strings"
	"testing"
)

func TestTokenFromEnv(t *testing.T) {
	good := map[string]string{"FENCE_LEASE": "nightly", "FENCE_OWNER": strings.Repeat("ab", 16), "FENCE_TOKEN": "1796345620123456"}
	get := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tok, err := tokenFromEnv(get(good))
	if err != nil || tok != (Token{Lease: "nightly", Owner: strings.Repeat("ab", 16), Fence: 1796345620123456}) {
		t.Fatalf("TokenFromEnv = %+v, %v", tok, err)
	}
	for k, v := range map[string]string{
		"FENCE_LEASE": "", "FENCE_OWNER": "", "FENCE_TOKEN": "",
	} {
		m := map[string]string{}
		for kk, vv := range good {
			m[kk] = vv
		}
		m[k] = v
		if _, err := tokenFromEnv(get(m)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s unset: %v, want ErrInvalid", k, err)
		}
	}
	for _, bad := range []string{"+7", "007", "-1", "0", "1e6", " 7", "99999999999999999999", "7#x"} {
		m := map[string]string{"FENCE_LEASE": "nightly", "FENCE_OWNER": strings.Repeat("ab", 16), "FENCE_TOKEN": bad}
		if _, err := tokenFromEnv(get(m)); !errors.Is(err, ErrInvalid) {
			t.Errorf("FENCE_TOKEN=%q: %v, want ErrInvalid", bad, err)
		}
	}
	m := map[string]string{"FENCE_LEASE": "nightly", "FENCE_OWNER": "not-hex", "FENCE_TOKEN": "7"}
	if _, err := tokenFromEnv(get(m)); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad owner: %v, want ErrInvalid", err)
	}
}
