package fencemcp_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencehttp"
	"github.com/fencekit/fence/fencemcp"
)

type vector struct {
	Key            string         `json:"key"`
	Token          fence.Token    `json:"-"`
	RawToken       map[string]any `json:"token"`
	Tool           string         `json:"tool"`
	Step           string         `json:"step"`
	OwnerID        string         `json:"owner_id"`
	Entry          fencemcp.Entry `json:"entry"`
	Header         string         `json:"header"`
	IdempotencyKey string         `json:"idempotency_key"`
}

// readVector reads the test vector block of docs/MCP.md, so the page and
// the code cannot drift apart.
func readVector(t *testing.T) vector {
	b, err := os.ReadFile("../docs/MCP.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- test-vector -->\n```json\n")
	if !ok {
		t.Fatal("docs/MCP.md has no test-vector block")
	}
	block, _, _ := strings.Cut(rest, "```")
	var v vector
	if err := json.Unmarshal([]byte(block), &v); err != nil {
		t.Fatal(err)
	}
	v.Token = fence.Token{Lease: v.RawToken["lease"].(string), Owner: v.RawToken["owner"].(string), Fence: int64(v.RawToken["fence"].(float64))}
	return v
}

func TestSpecVector(t *testing.T) {
	v := readVector(t)
	key := []byte(v.Key)
	e, err := fencemcp.Sign(key, v.Token, v.Tool, v.Step)
	if err != nil {
		t.Fatal(err)
	}
	if e != v.Entry {
		t.Fatalf("Sign = %+v, the spec says %+v", e, v.Entry)
	}
	if id := fencemcp.OwnerID(v.Token.Owner); id != v.OwnerID {
		t.Fatalf("OwnerID = %s, spec %s", id, v.OwnerID)
	}
	h, err := fencehttp.Sign(key, v.Token)
	if err != nil || h != v.Header {
		t.Fatalf("header = %s (%v), spec %s", h, err, v.Header)
	}
	ver, _ := fencemcp.NewVerifier(key, nil)
	raw := map[string]any{}
	b, _ := json.Marshal(v.Entry)
	_ = json.Unmarshal(b, &raw) // as a server decodes _meta
	c, err := ver.Verify(raw, v.Tool, []string{v.Header})
	if err != nil {
		t.Fatal(err)
	}
	if c.Fence != 7 || c.Lease != v.Token.Lease || c.Step != v.Step || c.IdempotencyKey() != v.IdempotencyKey {
		t.Fatalf("claim %+v (key %s)", c, c.IdempotencyKey())
	}
	// What a server refuses, each for the reason the spec gives.
	cases := []struct {
		name   string
		mutate func(m map[string]any)
		tool   string
		header []string
		want   error
	}{
		{"other tool", nil, "refund", nil, fencemcp.ErrForged},
		{"altered fence", func(m map[string]any) { m["fence"] = "8" }, v.Tool, nil, fencemcp.ErrForged},
		{"altered step", func(m map[string]any) { m["step"] = "charge-2" }, v.Tool, nil, fencemcp.ErrForged},
		{"fence as a number", func(m map[string]any) { m["fence"] = 7 }, v.Tool, nil, fence.ErrInvalid},
		{"leading zero", func(m map[string]any) { m["fence"] = "07" }, v.Tool, nil, fence.ErrInvalid},
		{"unknown field", func(m map[string]any) { m["extra"] = true }, v.Tool, nil, fence.ErrInvalid},
		{"version 2", func(m map[string]any) { m["v"] = 2 }, v.Tool, nil, fence.ErrInvalid},
		{"header of another fence", nil, v.Tool, []string{mustHeader(t, key, fence.Token{Lease: v.Token.Lease, Owner: v.Token.Owner, Fence: 8})}, fencemcp.ErrForged},
		{"header under another key", nil, v.Tool, []string{mustHeader(t, []byte(strings.Repeat("k", 32)), v.Token)}, fencemcp.ErrForged},
	}
	for _, tc := range cases {
		m := map[string]any{}
		for k, x := range raw {
			m[k] = x
		}
		if tc.mutate != nil {
			tc.mutate(m)
		}
		if _, err := ver.Verify(m, tc.tool, tc.header); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := ver.Verify(nil, v.Tool, nil); !errors.Is(err, fencemcp.ErrNoFence) {
		t.Errorf("no entry: %v", err)
	}
	// A lease the server does not serve.
	only, _ := fencemcp.NewVerifier(key, func(l string) bool { return l == "task:other" })
	if _, err := only.Verify(raw, v.Tool, nil); !errors.Is(err, fencemcp.ErrForged) {
		t.Errorf("unserved lease: %v", err)
	}
	// A step key with a newline would make the MAC input ambiguous.
	if _, err := fencemcp.Sign(key, v.Token, v.Tool, "a\nb"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("newline in step: %v", err)
	}
}

func mustHeader(t *testing.T, key []byte, tok fence.Token) string {
	h, err := fencehttp.Sign(key, tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestForwardVerifiedByFencehttp: the header fencemcp mints for a claim (it
// has the owner id, not the owner token) is accepted by fencehttp's own
// verifier, and a downstream request carries the step's idempotency key.
func TestForwardVerifiedByFencehttp(t *testing.T) {
	v := readVector(t)
	down := []byte(strings.Repeat("d", 32)) // the downstream service's key
	hv, err := fencehttp.NewVerifier(down, func(*http.Request) string { return v.Token.Lease })
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		claim fencehttp.Claim
		err   error
		idem  string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := hv.Verify(r)
		got <- seen{c, err, r.Header.Get(fencehttp.HeaderIdempotencyKey)}
	}))
	defer srv.Close()
	c := fencemcp.Claim{Lease: v.Token.Lease, Fence: 7, Owner: v.OwnerID, Tool: v.Tool, Step: v.Step}
	req, _ := http.NewRequestWithContext(fencemcp.WithClaim(t.Context(), c), "POST", srv.URL, nil)
	resp, err := (&http.Client{Transport: &fencemcp.Forward{Key: down}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s := <-got
	if s.err != nil || s.claim.Fence != 7 || s.claim.Owner != v.OwnerID || s.idem != v.IdempotencyKey {
		t.Fatalf("downstream saw %+v", s)
	}
	// The owner token's own header and the minted one are the same string.
	if h, _ := fencemcp.HeaderFor([]byte(v.Key), c); h != v.Header {
		t.Fatalf("HeaderFor = %s, fencehttp.Sign = %s", h, v.Header)
	}
}
