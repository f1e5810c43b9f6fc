package fence

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Token is one acquisition of a lease: the lease name, the random owner token
// of that acquisition, and its fence. It is the value that must travel from
// Acquire to every write that a stale worker must not make.
//
// Its text form is NAME#FENCE@OWNER, for example
// "admin:reconciliation#7@9f2c4e0b6a1d8e3f5c7b9a0d2e4f6a8c"; it round-trips
// through String, ParseToken, JSON and environment variables.
type Token struct {
	Lease string
	Owner string
	Fence int64
}

// ownerLen is the length of an owner token: 128 random bits in hex.
const ownerLen = 32

// newOwner returns a fresh owner token from crypto/rand.
func newOwner() (string, error) {
	var b [ownerLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fence: reading random owner token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// String returns the text form NAME#FENCE@OWNER.
func (t Token) String() string {
	return t.Lease + "#" + strconv.FormatInt(t.Fence, 10) + "@" + t.Owner
}

// IsZero reports whether t is the zero Token.
func (t Token) IsZero() bool { return t == Token{} }

// Validate checks the token's form — a valid lease name, an owner of 32
// hex digits, a positive fence — without asking the database whether it
// still holds the lease. Its error wraps ErrInvalid.
func (t Token) Validate() error { return validateToken(t) }

// ParseToken parses the text form produced by Token.String. The name may
// itself contain '#' or '@'; the owner and fence are read from the right.
func ParseToken(s string) (Token, error) {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return Token{}, fmt.Errorf("%w: token %q: want NAME#FENCE@OWNER, no '@'", ErrInvalid, clip(s))
	}
	owner := s[at+1:]
	if err := validateOwner(owner); err != nil {
		return Token{}, fmt.Errorf("%w: token %q: %v", ErrInvalid, clip(s), err)
	}
	hash := strings.LastIndexByte(s[:at], '#')
	if hash < 0 {
		return Token{}, fmt.Errorf("%w: token %q: want NAME#FENCE@OWNER, no '#'", ErrInvalid, clip(s))
	}
	digits := s[hash+1 : at]
	fence, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || fence <= 0 || digits[0] == '+' || digits[0] == '0' {
		return Token{}, fmt.Errorf("%w: token %q: fence %q is not a positive decimal integer", ErrInvalid, clip(s), clip(digits))
	}
	name := s[:hash]
	if err := ValidateName(name); err != nil {
		return Token{}, fmt.Errorf("token %q: %w", clip(s), err)
	}
	return Token{Lease: name, Owner: owner, Fence: fence}, nil
}

// MarshalText implements encoding.TextMarshaler.
func (t Token) MarshalText() ([]byte, error) {
	if t.IsZero() {
		return []byte{}, nil
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *Token) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*t = Token{}
		return nil
	}
	p, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// IdempotencyKey derives a stable key from the token's lease and the given
// parts, for calls to systems that cannot check the fence but deduplicate
// by key. The key names the effect, not the owner: the fence is left out,
// so when a newer generation retries a step that an older one completed
// just before it lost the lease, it sends the same key and the system
// answers with the first outcome instead of acting twice. So parts must
// name one effect (a task's step, a resource id): two effects that must
// both happen need different parts, including the same job's run of
// another day (put the run's date or id in the parts).
func IdempotencyKey(t Token, parts ...string) string {
	h := sha256.New()
	for _, p := range append([]string{t.Lease}, parts...) {
		// Length-prefixed, so ("a", "bc") and ("ab", "c") differ.
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Short returns NAME#FENCE@ and the first 8 hex digits of the owner, for
// tables and logs: the whole token is a credential (whoever has it can
// renew, release and write as the holder), so logs carry this form.
func (t Token) Short() string {
	return t.Lease + "#" + strconv.FormatInt(t.Fence, 10) + "@" + shortOwner(t.Owner)
}

func shortOwner(o string) string {
	if len(o) > 8 {
		return o[:8]
	}
	return o
}

func validateOwner(o string) error {
	if len(o) != ownerLen {
		return fmt.Errorf("owner must be %d hex characters, got %d", ownerLen, len(o))
	}
	for i := 0; i < len(o); i++ {
		c := o[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("owner must be lower-case hex")
		}
	}
	return nil
}

// clip keeps hostile or huge input out of error messages.
func clip(s string) string {
	const max = 48 // bytes; %q can make each one four characters
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
