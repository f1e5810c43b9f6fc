package fenceprom

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// rulesDir holds the alerting rules shipped for fence and their promtool tests.
const rulesDir = "../docs/alerts"

// The shipped alerting rules pass `promtool check rules` and their
// `promtool test rules` tests. Without promtool (Debian package prometheus)
// the test skips, unless FENCE_REQUIRE_TOOLS=1.
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FENCE_REQUIRE_TOOLS") == "1" {
			t.Fatalf("promtool not found and FENCE_REQUIRE_TOOLS=1: apt-get install prometheus (it ships /usr/bin/promtool)")
		}
		t.Skip("promtool not found: apt-get install prometheus to check docs/alerts (FENCE_REQUIRE_TOOLS=1 makes this a failure)")
	}
	for _, args := range [][]string{
		{"check", "rules", "fence.rules.yml"},
		{"test", "rules", "fence.rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every fence_ metric the rules use is one this package exports, so a
// renamed metric cannot leave an alert that never fires.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(rulesDir, "fence.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	descs := make(chan *prometheus.Desc, 100)
	New().Describe(descs)
	NewStoreCollector(nil).Describe(descs)
	close(descs)
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		exported[name.FindStringSubmatch(d.String())[1]] = true
	}
	var rules []string // the file without its comments
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			rules = append(rules, l)
		}
	}
	used := regexp.MustCompile(`\bfence_[a-z_]+`).FindAllString(strings.Join(rules, "\n"), -1)
	if len(used) == 0 {
		t.Fatal("the rules use no fence_ metric")
	}
	for _, u := range used {
		if !exported[u] {
			t.Errorf("docs/alerts/fence.rules.yml uses %s, which fenceprom does not export", u)
		}
	}
}
