package fencemcp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencehttp"
)

// MetaKey is the name of the signed entry in a tools/call request's
// params._meta: a reverse-DNS prefix of fence's, as MCP asks of extensions.
const MetaKey = "dev.fence/epoch"

// RefusalKey is the name of the entry in a refused call's result _meta
// that says why the server refused it and whether a retry can help.
const RefusalKey = "dev.fence/refused"

// HeaderFence is the HTTP header a streamable-HTTP call also carries: the
// fencehttp form of the same fence (FENCE.OWNER.MAC), so an HTTP proxy or
// gateway in front of the MCP server can check it without parsing JSON-RPC.
const HeaderFence = fencehttp.HeaderFence

// Version is the version of the entry's format and MAC input.
const Version = 1

// MaxStepLen bounds a step key, as fence bounds a lease name.
const MaxStepLen = fence.MaxNameLen

// Entry is the signed _meta entry of one tool call. Fence is a decimal
// string, not a JSON number, so that a verifier in a language whose
// numbers are doubles reads every int64 exactly.
type Entry struct {
	V     int    `json:"v"`
	Lease string `json:"lease"`
	Fence string `json:"fence"`
	Owner string `json:"owner"`
	Step  string `json:"step"`
	MAC   string `json:"mac"`
}

// Claim is an entry whose signature a Verifier has checked.
type Claim struct {
	Lease string // the lease whose fence is the epoch: "task:<id>" for a task
	Fence int64  // the epoch
	Owner string // owner id: a digest of the holder's owner token
	Tool  string // the tool the entry was signed for
	Step  string // the step key: names the effect across epochs
}

// Task returns the task id of a claim whose lease is a task's ("task:<id>").
func (c Claim) Task() (string, bool) {
	return strings.CutPrefix(c.Lease, "task:")
}

// Token returns the claim as a fence.Token whose Owner is the owner id, not
// the owner token: it carries the right lease and fence for
// fence.ExecResource and fence.ResourceQuery, which use only those, and it
// cannot renew, release or pass Store.Exec for the holder's lease.
func (c Claim) Token() fence.Token {
	return fence.Token{Lease: c.Lease, Owner: c.Owner, Fence: c.Fence}
}

// IdempotencyKey names the claim's effect for a downstream service: the
// same for every epoch of the step, so a newer epoch retrying a step that an
// older one committed is recognised as the same effect.
func (c Claim) IdempotencyKey() string { return IdempotencyKey(c.Lease, c.Step) }

// IdempotencyKey is Claim.IdempotencyKey for a lease and step key.
func IdempotencyKey(lease, step string) string {
	sum := sha256.Sum256([]byte("fencemcp/step\n" + lease + "\n" + step))
	return hex.EncodeToString(sum[:16])
}

// Errors of the receiving side. A refusal because of any of them tells the
// client not to retry, except ErrUnavailable.
var (
	// ErrSuperseded: the epoch is no longer the task's current one (a
	// takeover, a replan, a cancel, or the lease ran out).
	ErrSuperseded = errors.New("fencemcp: superseded, do not retry")
	// ErrForged: the MAC does not match, or the HTTP header and the _meta
	// entry disagree.
	ErrForged = errors.New("fencemcp: fence entry forged or altered, do not retry")
	// ErrNoFence: the call carries no entry and the server requires one.
	ErrNoFence = errors.New("fencemcp: tool call carries no fence entry (" + MetaKey + "), do not retry without one")
	// ErrUnavailable: the check could not be made (database error); the
	// call did nothing and may be retried.
	ErrUnavailable = errors.New("fencemcp: fence check unavailable, retry later")
)

// Sign returns the entry for a call of tool as step by the holder of t.
// Only the holder side and the MCP server share key (at least
// fencehttp.MinKeyLen bytes): with it anyone can mint any epoch.
func Sign(key []byte, t fence.Token, tool, step string) (Entry, error) {
	if len(key) < fencehttp.MinKeyLen {
		return Entry{}, fmt.Errorf("%w: fencemcp: key is %d bytes, want at least %d random bytes", fence.ErrInvalid, len(key), fencehttp.MinKeyLen)
	}
	if err := t.Validate(); err != nil {
		return Entry{}, fmt.Errorf("fencemcp: cannot sign: %w", err)
	}
	if err := validateText("tool name", tool); err != nil {
		return Entry{}, err
	}
	if err := validateText("step key", step); err != nil {
		return Entry{}, err
	}
	e := Entry{V: Version, Lease: t.Lease, Fence: strconv.FormatInt(t.Fence, 10), Owner: OwnerID(t.Owner), Step: step}
	e.MAC = hex.EncodeToString(entryMAC(key, e.Lease, e.Fence, e.Owner, tool, e.Step))
	return e, nil
}

// validateText refuses what would make the MAC input ambiguous (a newline
// separates its fields) or a key no log can show.
func validateText(what, s string) error {
	if s == "" || len(s) > MaxStepLen {
		return fmt.Errorf("%w: fencemcp: %s must be 1 to %d bytes", fence.ErrInvalid, what, MaxStepLen)
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return fmt.Errorf("%w: fencemcp: %s %q contains a control character", fence.ErrInvalid, what, s)
	}
	return nil
}

// OwnerID is the digest that stands for an owner token on the wire. It is
// fencehttp's, so the Fence-Token header and the _meta entry name the same
// owner; the owner token itself can renew and release the lease, so it
// never leaves the holder.
func OwnerID(owner string) string {
	return fencehttp.OwnerID(owner)
}

// entryMAC is HMAC-SHA256 over the fields, newline-separated: no field can
// contain a newline (lease names and step keys refuse control characters,
// fence and owner are digits and hex).
func entryMAC(key []byte, lease, fenceDigits, owner, tool, step string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("fencemcp/v1\n" + lease + "\n" + fenceDigits + "\n" + owner + "\n" + tool + "\n" + step))
	return m.Sum(nil)
}

// Verifier checks entries under the key the clients sign with.
type Verifier struct {
	key   []byte
	lease func(string) bool
}

// NewVerifier returns a Verifier for key. accept decides which leases this
// server serves (nil: task leases, "task:<id>"); an entry for another lease
// is refused as forged, since the server, not the client, says what guards
// its tools.
func NewVerifier(key []byte, accept func(lease string) bool) (*Verifier, error) {
	if len(key) < fencehttp.MinKeyLen {
		return nil, fmt.Errorf("%w: fencemcp: key is %d bytes, want at least %d random bytes", fence.ErrInvalid, len(key), fencehttp.MinKeyLen)
	}
	if accept == nil {
		accept = func(l string) bool { return strings.HasPrefix(l, "task:") }
	}
	return &Verifier{key: append([]byte(nil), key...), lease: accept}, nil
}

// Verify checks the raw _meta entry (as decoded from JSON: a map, or
// json.RawMessage, or an Entry) of a call of tool, and the HTTP
// Fence-Token header values if the call came over HTTP (nil for stdio).
// A header, when present, must carry the same lease, fence and owner.
func (v *Verifier) Verify(raw any, tool string, header []string) (Claim, error) {
	if raw == nil {
		return Claim{}, ErrNoFence
	}
	e, err := decodeEntry(raw)
	if err != nil {
		return Claim{}, err
	}
	if e.V != Version {
		return Claim{}, fmt.Errorf("%w: fencemcp: entry version %d, this server reads %d", fence.ErrInvalid, e.V, Version)
	}
	f, err := parseFence(e.Fence)
	if err != nil {
		return Claim{}, err
	}
	if err := fence.ValidateName(e.Lease); err != nil {
		return Claim{}, fmt.Errorf("%w: fencemcp: entry lease: %v", fence.ErrInvalid, err)
	}
	if len(e.Owner) != 32 || strings.ContainsFunc(e.Owner, notHex) || len(e.MAC) != 64 || strings.ContainsFunc(e.MAC, notHex) {
		return Claim{}, fmt.Errorf("%w: fencemcp: entry owner must be 32 and mac 64 lower-case hex digits", fence.ErrInvalid)
	}
	if err := validateText("step key", e.Step); err != nil {
		return Claim{}, err
	}
	sum, _ := hex.DecodeString(e.MAC)
	if !hmac.Equal(sum, entryMAC(v.key, e.Lease, e.Fence, e.Owner, tool, e.Step)) {
		return Claim{}, fmt.Errorf("%w: lease %q epoch %s step %q tool %q (signed with another key, for another tool, or altered)", ErrForged, e.Lease, e.Fence, e.Step, tool)
	}
	if !v.lease(e.Lease) {
		return Claim{}, fmt.Errorf("%w: lease %q is not one this server serves", ErrForged, e.Lease)
	}
	c := Claim{Lease: e.Lease, Fence: f, Owner: e.Owner, Tool: tool, Step: e.Step}
	if len(header) > 0 {
		if err := v.checkHeader(c, header); err != nil {
			return Claim{}, err
		}
	}
	return c, nil
}

// checkHeader verifies the Fence-Token header with fencehttp's own
// verifier, for the entry's lease, and compares it with the entry.
func (v *Verifier) checkHeader(c Claim, header []string) error {
	hv, err := fencehttp.NewVerifier(v.key, func(*http.Request) string { return c.Lease })
	if err != nil {
		return err
	}
	r := &http.Request{Header: http.Header{HeaderFence: header}}
	hc, err := hv.Verify(r)
	switch {
	case errors.Is(err, fencehttp.ErrSignature):
		return fmt.Errorf("%w: the %s header: %v", ErrForged, HeaderFence, err)
	case err != nil:
		return err
	case hc.Fence != c.Fence || hc.Owner != c.Owner:
		return fmt.Errorf("%w: the %s header says fence %d owner %s, the %s entry fence %d owner %s", ErrForged, HeaderFence, hc.Fence, hc.Owner, MetaKey, c.Fence, c.Owner)
	}
	return nil
}

func decodeEntry(raw any) (Entry, error) {
	var b []byte
	switch r := raw.(type) {
	case Entry:
		return r, nil
	case *Entry:
		return *r, nil
	case json.RawMessage:
		b = r
	case []byte:
		b = r
	default:
		var err error
		if b, err = json.Marshal(raw); err != nil {
			return Entry{}, fmt.Errorf("%w: fencemcp: entry: %v", fence.ErrInvalid, err)
		}
	}
	var e Entry
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Entry{}, fmt.Errorf("%w: fencemcp: %s entry is not {v, lease, fence, owner, step, mac}: %v", fence.ErrInvalid, MetaKey, err)
	}
	return e, nil
}

func parseFence(s string) (int64, error) {
	if s == "" || len(s) > 19 || s[0] == '0' || strings.ContainsFunc(s, notDigit) {
		return 0, fmt.Errorf("%w: fencemcp: entry fence %q is not a positive decimal integer without sign or leading zeros", fence.ErrInvalid, s)
	}
	f, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: fencemcp: entry fence %q does not fit in 64 bits", fence.ErrInvalid, s)
	}
	return f, nil
}

func notDigit(r rune) bool { return r < '0' || r > '9' }
func notHex(r rune) bool   { return notDigit(r) && (r < 'a' || r > 'f') }
