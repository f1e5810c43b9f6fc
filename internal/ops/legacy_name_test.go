package ops_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/ops"
)

// A lease named before fence refused control and format characters is
// shown with them as \u escapes: the page, the API's display text and the
// timeline. Before, U+202E reached the page raw and reversed the text
// after it. The raw name stays the row key and the link.
func TestLegacyNameShownEscaped(t *testing.T) {
	ctx := context.Background()
	s, err := fencedsn.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "f.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "legacy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartRun(ctx, l.Token, nil); err != nil {
		t.Fatal(err)
	}
	const legacy = "report\u202eko-\u0085x\u009b"
	if err := fence.ValidateName(legacy); err == nil {
		t.Fatal("the name is accepted: the test needs one fence refuses")
	}
	for _, table := range []string{"leases", "runs"} {
		if _, err := s.DB().ExecContext(ctx, "UPDATE "+s.Prefix()+table+" SET lease_name = ? WHERE lease_name = 'legacy'", legacy); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(ops.Handler(s))
	defer srv.Close()
	const want = `report\u202eko-\u0085x\u009b`
	for _, path := range []string{"/", "/api/timeline"} {
		_, body := get(t, srv.URL+path)
		// The data-lease attribute keeps the raw name: it is the row's key,
		// never rendered.
		body = regexp.MustCompile(`data-lease="[^"]*"`).ReplaceAllString(body, "")
		for _, r := range []rune{0x202e, 0x85, 0x9b} {
			if strings.ContainsRune(body, r) {
				t.Errorf("%s shows U+%04X raw", path, r)
			}
		}
		if path == "/" && !strings.Contains(body, want) {
			t.Errorf("%s does not show the name as %s", path, want)
		}
	}
	_, body := get(t, srv.URL+"/api/leases")
	if !strings.Contains(body, `"name_text":"report\\u202eko-\\u0085x\\u009b"`) {
		t.Errorf("/api/leases lacks the display text: %s", body)
	}
	_, body = get(t, srv.URL+"/api/runs")
	if !strings.Contains(body, `"lease_text":"report\\u202eko-\\u0085x\\u009b"`) {
		t.Errorf("/api/runs lacks the display text: %s", body)
	}
}
