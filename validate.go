package fence

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on input, checked before anything reaches the database.
const (
	// MaxNameLen is the longest lease name in bytes. 191 keeps a utf8mb4
	// primary key within InnoDB's index limit.
	MaxNameLen = 191
	// MinTTL and MaxTTL bound a lease's time to live. Leases are timed in
	// whole milliseconds of database time.
	MinTTL = time.Millisecond
	MaxTTL = 7 * 24 * time.Hour
	// DefaultTTL is the TTL the runner and CLI use unless told otherwise.
	DefaultTTL = 30 * time.Second
	// DefaultPrefix is the table prefix unless WithPrefix says otherwise.
	DefaultPrefix = "fence_"
	// MaxHolderLen is the longest holder name (WithHolder) in bytes, the
	// size of the holder columns.
	MaxHolderLen = 255
)

// ErrInvalid is wrapped by every error about bad input: a name, TTL, prefix,
// token or DSN that fence refused before touching the database.
var ErrInvalid = errors.New("fence: invalid input")

var prefixRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// ValidateName reports whether name can be a lease name: 1 to 191 bytes of
// UTF-8 that print as what they are: no control characters (C0, DEL, C1
// such as U+0085 and U+009B, which terminals obey), no format characters
// (Cf: bidi overrides and isolates such as U+202E, which reorder the text
// around the name, zero-width characters and U+FEFF, which make two names
// look alike) and no line or paragraph separators.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: lease name is empty", ErrInvalid)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: lease name is %d bytes, the limit is %d", ErrInvalid, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: lease name %q is not valid UTF-8", ErrInvalid, clip(name))
	case strings.ContainsFunc(name, invisibleRune):
		return fmt.Errorf("%w: lease name %q contains a control character or an invisible one", ErrInvalid, clip(name))
	}
	return nil
}

// ValidateHolder reports whether h can be a holder name (WithHolder): 1 to
// 255 bytes of UTF-8 that print as what they are, so that a name read in
// `fence leases`, on the page or in an error is the name that was set:
// no control characters (C0, DEL, C1), no invisible formatting characters
// (bidi overrides and isolates, zero-width characters, byte order mark) and
// no line or paragraph separators.
func ValidateHolder(h string) error {
	switch {
	case h == "":
		return fmt.Errorf("%w: holder name is empty; leave WithHolder out for the default host:pid", ErrInvalid)
	case len(h) > MaxHolderLen:
		return fmt.Errorf("%w: holder name is %d bytes, the limit is %d", ErrInvalid, len(h), MaxHolderLen)
	case !utf8.ValidString(h):
		return fmt.Errorf("%w: holder name %q is not valid UTF-8", ErrInvalid, clip(h))
	case strings.ContainsFunc(h, invisibleRune):
		return fmt.Errorf("%w: holder name %q contains a control, formatting or line-separator character; use printable text such as host:pid", ErrInvalid, clip(h))
	}
	return nil
}

// invisibleRune reports a rune that does not print as itself: a control
// character (C0, DEL, C1), a format character (Cf: bidi controls, zero-width
// characters, U+FEFF) or a line or paragraph separator.
func invisibleRune(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// ValidateTTL reports whether ttl is within MinTTL..MaxTTL.
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %v is outside %v..%v", ErrInvalid, ttl, MinTTL, MaxTTL)
	}
	return nil
}

// ValidatePrefix reports whether p can prefix fence's table names: a letter
// or underscore, then up to 40 letters, digits or underscores.
func ValidatePrefix(p string) error {
	if strings.Contains(p, ".") && !strings.ContainsAny(p, " ;'\"`") {
		return fmt.Errorf("%w: table prefix %q names a schema: a prefix is part of each table's name, not a schema; "+
			"to put fence's tables in a PostgreSQL schema, set the connection's search_path "+
			"(DSN parameter search_path=%s, or ALTER ROLE … SET search_path) and use a plain prefix; on MySQL, name the database in the DSN",
			ErrInvalid, clip(p), clip(strings.SplitN(p, ".", 2)[0]))
	}
	if !prefixRE.MatchString(p) {
		return fmt.Errorf("%w: table prefix %q must match %s", ErrInvalid, clip(p), prefixRE)
	}
	return nil
}

func validateToken(t Token) error {
	if err := ValidateName(t.Lease); err != nil {
		return err
	}
	if err := validateOwner(t.Owner); err != nil {
		return fmt.Errorf("%w: token for %q: %v", ErrInvalid, t.Lease, err)
	}
	if t.Fence <= 0 {
		return fmt.Errorf("%w: token for %q: fence %d is not positive", ErrInvalid, t.Lease, t.Fence)
	}
	return nil
}

// ttlMillis rounds a TTL up to whole milliseconds so a lease never lives
// shorter than asked.
func ttlMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}
