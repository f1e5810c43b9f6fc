package fencehttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/fencekit/fence"
)

// Refusals are RFC 9457 problem details (application/problem+json) whose
// type tells the client what it may do. The one distinction a client must
// never get wrong: a stale fence (412, ProblemStale) means a newer holder
// has written and this holder must stop, never retry; a request in flight
// (409, ProblemInFlight) means the same Idempotency-Key is being served
// right now and the client should retry later. 409 is what the HTTP
// Idempotency-Key draft uses for "in flight", so a stale fence is not 409.
const (
	problemBase = "https://github.com/fencekit/fence/blob/main/docs/fencehttp-problems.md#"

	// ProblemStale (412): a higher fence, or this fence of another owner,
	// has written the resource. Never retry: the holder was superseded.
	ProblemStale = problemBase + "stale-fence"
	// ProblemInFlight (409): a request with this Idempotency-Key is being
	// served. Retry later with the same key; it then gets that outcome.
	ProblemInFlight = problemBase + "in-flight"
	// ProblemKeyReused (422): the Idempotency-Key was used before for a
	// different request (method, target or body). Never retry it.
	ProblemKeyReused = problemBase + "key-reused"
	// ProblemNoKey (400): the endpoint stores outcomes per key and the
	// request has no usable Idempotency-Key.
	ProblemNoKey = problemBase + "no-idempotency-key"
	// ProblemNoFence (428): no Fence-Token header.
	ProblemNoFence = problemBase + "no-fence"
	// ProblemMalformed (400): a malformed Fence-Token header.
	ProblemMalformed = problemBase + "malformed-fence"
	// ProblemSignature (403): the fence's signature does not match.
	ProblemSignature = problemBase + "bad-signature"
	// ProblemTooLarge (413): the body is larger than the ledger hashes.
	ProblemTooLarge = problemBase + "too-large"
	// ProblemUnavailable (503): the check could not be made, or a commit's
	// outcome is unknown. Retry with the same Idempotency-Key.
	ProblemUnavailable = problemBase + "unavailable"
	// ProblemServer (500): the server's own configuration failed.
	ProblemServer = problemBase + "server"
)

// ContentTypeProblem is RFC 9457's media type.
const ContentTypeProblem = "application/problem+json"

// Errors a client gets from CheckResponse, besides fence.ErrStale.
var (
	// ErrInFlight: the same Idempotency-Key is being served; retry later.
	ErrInFlight = errors.New("fencehttp: request with this idempotency key in flight")
	// ErrKeyReused: the Idempotency-Key was used for another request.
	ErrKeyReused = errors.New("fencehttp: idempotency key reused for a different request")
)

// Problem is an RFC 9457 problem detail as fencehttp writes it.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Retry says whether the same request may succeed later: false for a
	// stale fence, whatever the client's retry policy.
	Retry bool `json:"retry"`
}

var problems = map[string]struct {
	status int
	title  string
	retry  bool
}{
	ProblemStale:       {http.StatusPreconditionFailed, "Stale fence: a newer holder has written; do not retry", false},
	ProblemInFlight:    {http.StatusConflict, "A request with this Idempotency-Key is in flight; retry later", true},
	ProblemKeyReused:   {http.StatusUnprocessableEntity, "Idempotency-Key reused for a different request", false},
	ProblemNoKey:       {http.StatusBadRequest, "Missing or malformed Idempotency-Key", false},
	ProblemNoFence:     {http.StatusPreconditionRequired, "Missing " + HeaderFence + " header", false},
	ProblemMalformed:   {http.StatusBadRequest, "Malformed " + HeaderFence + " header", false},
	ProblemSignature:   {http.StatusForbidden, "Fence signature does not match", false},
	ProblemTooLarge:    {http.StatusRequestEntityTooLarge, "Request body too large", false},
	ProblemUnavailable: {http.StatusServiceUnavailable, "Fence check unavailable; retry with the same Idempotency-Key", true},
	ProblemServer:      {http.StatusInternalServerError, "Server configuration error", false},
}

// writeProblem writes the problem of type typ with detail.
func writeProblem(w http.ResponseWriter, typ, detail string) {
	p := problems[typ]
	b, _ := json.Marshal(Problem{Type: typ, Title: p.title, Status: p.status, Detail: detail, Retry: p.retry})
	w.Header().Set("Content-Type", ContentTypeProblem)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.status)
	w.Write(append(b, '\n'))
}

// problemOf is the problem type of a refusal.
func problemOf(err error) string {
	switch {
	case errors.Is(err, ErrNoFence):
		return ProblemNoFence
	case errors.Is(err, errLeaseFunc):
		return ProblemServer
	case errors.Is(err, fence.ErrInvalid):
		return ProblemMalformed
	case errors.Is(err, ErrSignature):
		return ProblemSignature
	case errors.Is(err, fence.ErrStale):
		return ProblemStale
	}
	return ProblemUnavailable
}

// ProblemError is a fencehttp refusal read back by CheckResponse.
// errors.Is matches fence.ErrStale and fence.ErrLost for a stale fence,
// ErrInFlight and ErrKeyReused for theirs; fence.IsRetryable is true only
// for in flight and unavailable.
type ProblemError struct {
	Problem
}

func (e *ProblemError) Error() string {
	msg := fmt.Sprintf("fencehttp: %d %s", e.Status, e.Title)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is maps the problem type onto fence's and fencehttp's sentinels.
func (e *ProblemError) Is(target error) bool {
	switch e.Type {
	case ProblemStale:
		return target == fence.ErrStale || target == fence.ErrLost
	case ProblemInFlight:
		return target == ErrInFlight
	case ProblemKeyReused:
		return target == ErrKeyReused
	case ProblemSignature:
		return target == ErrSignature
	case ProblemNoFence:
		return target == ErrNoFence
	}
	return false
}

// Retryable is read by fence.IsRetryable.
func (e *ProblemError) Retryable() bool { return problems[e.Type].retry }

// maxProblem bounds how much of a problem body CheckResponse reads.
const maxProblem = 64 << 10

// CheckResponse returns a *ProblemError when resp is a fencehttp refusal
// (an application/problem+json body of one of fencehttp's types), and nil
// for any other response, which the caller judges by its status. It reads
// and closes the body of a refusal; another server's problem body is
// left for the caller to read. A stale fence's error is definite:
// the holder was superseded, and no retry will succeed.
func CheckResponse(resp *http.Response) error {
	if resp == nil || resp.StatusCode < 400 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != ContentTypeProblem {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxProblem))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("fencehttp: reading the %d response's problem: %w", resp.StatusCode, err)
	}
	var p Problem
	if err := json.Unmarshal(b, &p); err != nil || !strings.HasPrefix(p.Type, problemBase) {
		// Another server's problem: the caller reads it.
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	if _, known := problems[p.Type]; !known {
		return fmt.Errorf("fencehttp: %d response with problem type %q, unknown to this version of fencehttp", resp.StatusCode, p.Type)
	}
	p.Status = resp.StatusCode
	return &ProblemError{Problem: p}
}
