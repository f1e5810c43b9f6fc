package fence

import (
	"fmt"
	"os"
	"strconv"
)

// TokenFromEnv returns the token of the lease a program runs under when
// `fence run` started it: FENCE_LEASE, FENCE_OWNER and FENCE_TOKEN (the
// fence number; the name is the shell's, and the Token type is all three).
// The program can then fence its own writes with Store.Exec. The error wraps
// ErrInvalid when a variable is missing or malformed, which also means the
// program was not started by `fence run`.
func TokenFromEnv() (Token, error) {
	return tokenFromEnv(os.Getenv)
}

func tokenFromEnv(getenv func(string) string) (Token, error) {
	lease, owner, num := getenv("FENCE_LEASE"), getenv("FENCE_OWNER"), getenv("FENCE_TOKEN")
	if lease == "" || owner == "" || num == "" {
		return Token{}, fmt.Errorf("%w: FENCE_LEASE, FENCE_OWNER and FENCE_TOKEN are not all set: not started by 'fence run'?", ErrInvalid)
	}
	fence, err := strconv.ParseInt(num, 10, 64)
	if err != nil || strconv.FormatInt(fence, 10) != num {
		return Token{}, fmt.Errorf("%w: FENCE_TOKEN %q is not a fence number", ErrInvalid, clip(num))
	}
	t := Token{Lease: lease, Owner: owner, Fence: fence}
	if err := validateToken(t); err != nil {
		return Token{}, err
	}
	return t, nil
}
