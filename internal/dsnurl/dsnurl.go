// Package dsnurl splits postgres:// and mysql:// data source names the way
// pgx does (pgconn's libpq-compatible URI parser), so that fence, pgx and
// fence's MySQL driver agree on which bytes are the password.
//
// The rules, from pgx v5.13 (pgconn/parse_url.go), which copies libpq:
//
//   - the userinfo ends at the first '@' that comes before any '/'; '?',
//     '#' and ':' inside it are ordinary bytes (a '#' starts no fragment, a
//     '?' no query), and the password is what follows its first ':';
//   - the host list ends at the first '/' or '?';
//   - the database name ends at the first '?';
//   - the query is '&'-separated key=value pairs with exactly one '='.
//
// Where a DSN could mean something else to a reader who splits at the LAST
// '@' (net/url, go-sql-driver's own format, a human), Parse refuses it
// rather than guess: an '@' in the host list or the database name is
// always a password byte that needed percent-encoding. A refused DSN's
// error names the part that is wrong and never quotes any byte of the
// input, since without agreement on the structure any byte may belong to
// the password.
package dsnurl

import (
	"errors"
	"strconv"
	"strings"
)

// URL is a parsed DSN. Strings are percent-decoded.
type URL struct {
	Scheme      string // lower case: postgres, postgresql or mysql
	User        string
	Password    string
	HasUserinfo bool
	HasPassword bool
	// Hosts is the host list as written (still percent-encoded), safe to
	// print: it passed the checks above, so it holds no userinfo byte.
	Hosts []HostPort
	// DBName is the path after the host list, without its '/'.
	DBName  string
	HasPath bool
	Params  []Param

	// PasswordSpan is the password's byte range in the input ([0,0) when
	// there is none), for tests that mutate exactly the secret.
	PasswordSpan [2]int
}

// HostPort is one entry of the host list, as written.
type HostPort struct {
	Host string // IPv6 addresses keep their brackets
	Port string // "" when not given
}

// Param is one query parameter.
type Param struct {
	Key, Value string
	// ValueSpan is the raw value's byte range in the input.
	ValueSpan [2]int
}

// Get returns the last value of key (as pgx, last occurrence wins).
func (u *URL) Get(key string) (string, bool) {
	for i := len(u.Params) - 1; i >= 0; i-- {
		if u.Params[i].Key == key {
			return u.Params[i].Value, true
		}
	}
	return "", false
}

// Parse splits dsn, which must start with scheme://.
func Parse(dsn string) (*URL, error) {
	if strings.IndexByte(dsn, 0) >= 0 {
		return nil, errors.New("DSN contains a NUL byte")
	}
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return nil, errors.New("DSN is not a URL (want scheme://user:password@host:port/dbname)")
	}
	u := &URL{Scheme: strings.ToLower(scheme)}
	off := len(scheme) + 3 // offset of rest in dsn
	p := rest

	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		u.HasUserinfo = true
		user, pass, hasPass := strings.Cut(p[:i], ":")
		var err error
		if u.User, err = decode(user); err != nil {
			return nil, errors.New("the user name " + err.Error())
		}
		if hasPass {
			if u.Password, err = decode(pass); err != nil {
				return nil, errors.New("the password " + err.Error())
			}
			u.HasPassword = pass != ""
			start := off + len(user) + 1
			u.PasswordSpan = [2]int{start, start + len(pass)}
		}
		p = p[i+1:]
		off += i + 1
	}

	end := strings.IndexAny(p, "/?")
	if end < 0 {
		end = len(p)
	}
	hosts := p[:end]
	if strings.IndexByte(hosts, '@') >= 0 {
		return nil, errors.New("DSN has more than one '@' before the host: percent-encode '@' in the user name or password as %40")
	}
	if hosts == "" {
		return nil, errors.New("DSN has no host (want scheme://user:password@host:port/dbname)")
	}
	for h := range strings.SplitSeq(hosts, ",") {
		hp, err := splitHostPort(h)
		if err != nil {
			return nil, err
		}
		u.Hosts = append(u.Hosts, hp)
	}
	p = p[end:]
	off += end

	if strings.HasPrefix(p, "/") {
		u.HasPath = true
		db := p[1:]
		p = ""
		if i := strings.IndexByte(db, '?'); i >= 0 {
			db, p = db[:i], db[i:]
		}
		if strings.IndexByte(db, '@') >= 0 {
			return nil, errors.New("DSN has an '@' after the host: a '/' in the password must be percent-encoded as %2F (and an '@' in the database name as %40)")
		}
		var err error
		if u.DBName, err = decode(db); err != nil {
			return nil, errors.New("the database name " + err.Error())
		}
		off += 1 + len(db)
	}

	if q, ok := strings.CutPrefix(p, "?"); ok {
		off++
		for q != "" {
			pair := q
			if i := strings.IndexByte(q, '&'); i >= 0 {
				pair, q = q[:i], q[i+1:]
			} else {
				q = ""
			}
			rawKey, rawVal, found := strings.Cut(pair, "=")
			if !found || strings.IndexByte(rawVal, '=') >= 0 {
				return nil, errors.New("DSN query parameter " + strconv.Itoa(len(u.Params)+1) + " is not key=value with exactly one '=' (percent-encode '=' in a value as %3D)")
			}
			key, err := decode(rawKey)
			if err != nil {
				return nil, errors.New("the name of DSN query parameter " + strconv.Itoa(len(u.Params)+1) + " " + err.Error())
			}
			val, err := decode(rawVal)
			if err != nil {
				// Not named: with an unencoded '@' later in the DSN, even a
				// parameter's name can be part of the password.
				return nil, errors.New("the value of DSN query parameter " + strconv.Itoa(len(u.Params)+1) + " " + err.Error())
			}
			vstart := off + len(rawKey) + 1
			u.Params = append(u.Params, Param{Key: key, Value: val, ValueSpan: [2]int{vstart, vstart + len(rawVal)}})
			off += len(pair) + 1
		}
	}
	return u, nil
}

func splitHostPort(h string) (HostPort, error) {
	var hp HostPort
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 2 {
			return hp, errors.New("DSN has an unterminated or empty IPv6 address in brackets")
		}
		hp.Host, h = h[:end+1], h[end+1:]
		if h != "" && h[0] != ':' {
			return hp, errors.New("DSN has text after an IPv6 address (want [addr]:port)")
		}
	} else {
		i := strings.IndexByte(h, ':')
		if i < 0 {
			i = len(h)
		}
		hp.Host, h = h[:i], h[i:]
		if hp.Host == "" {
			return hp, errors.New("DSN has an empty host name")
		}
	}
	if port, ok := strings.CutPrefix(h, ":"); ok {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '+' {
			// Not quoted: with an unencoded '/' or '@' in a password, what
			// stands here is the password (postgres://u:Xy7#…).
			return hp, errors.New("DSN has a port that is not a number from 1 to 65535 (if the password holds a '/' or '@', percent-encode them as %2F and %40)")
		}
		hp.Port = port
	}
	return hp, nil
}

// decode percent-decodes like pgx's uriDecode: %XX with two hex digits,
// %00 forbidden, leading and trailing spaces dropped, inner spaces refused.
// Its errors never quote the input.
func decode(raw string) (string, error) {
	raw = strings.Trim(raw, " ")
	if strings.IndexByte(raw, ' ') >= 0 {
		return "", errors.New("contains a space: percent-encode it as %20")
	}
	if strings.IndexByte(raw, '%') < 0 {
		return raw, nil
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] != '%' {
			b.WriteByte(raw[i])
			continue
		}
		if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
			return "", errors.New("has a '%' that does not start a percent-escape: write '%' as %25")
		}
		c := unhex(raw[i+1])<<4 | unhex(raw[i+2])
		if c == 0 {
			return "", errors.New("contains %00")
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// IsSecret reports whether a query parameter's value must never be shown:
// passwords (password, sslpassword, MySQL's password), anything named like
// a secret, token, key or credential.
func IsSecret(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"pass", "pwd", "secret", "token", "key", "credential", "auth"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// Describe quotes a parameter name for an error message: clipped, and
// only if it is printable ASCII.
func Describe(key string) string {
	if len(key) > 40 {
		return "(a parameter name over 40 bytes)"
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "(a parameter name with unprintable bytes)"
		}
	}
	return strconv.Quote(key)
}

// SecretSpans returns the byte ranges of dsn that hold secrets.
func (u *URL) SecretSpans() [][2]int {
	var out [][2]int
	if u.HasPassword {
		out = append(out, u.PasswordSpan)
	}
	for _, p := range u.Params {
		if IsSecret(p.Key) {
			out = append(out, p.ValueSpan)
		}
	}
	return out
}

// Secrets returns every secret of u (the password and the values of secret
// parameters), in the forms a library may print them: decoded, and as
// written. Empty strings are left out.
func (u *URL) Secrets(dsn string) []string {
	var out []string
	add := func(decoded string, span [2]int) {
		if decoded != "" {
			out = append(out, decoded)
		}
		if span[1] > span[0] && span[1] <= len(dsn) {
			out = append(out, dsn[span[0]:span[1]])
		}
	}
	if u.HasPassword {
		add(u.Password, u.PasswordSpan)
	}
	for _, p := range u.Params {
		if IsSecret(p.Key) {
			add(p.Value, p.ValueSpan)
		}
	}
	return out
}
