package ops

import (
	"slices"
	"strings"
	"testing"
)

// Fences are shown in groups of three digits from the right; the groups
// concatenate back to the exact number.
func TestDigitGroups(t *testing.T) {
	for n, want := range map[int64][]string{
		0:                   {"0"},
		7:                   {"7"},
		999:                 {"999"},
		1000:                {"1", "000"},
		1796343098170000:    {"1", "796", "343", "098", "170", "000"},
		9007199254740991:    {"9", "007", "199", "254", "740", "991"},
		-1234:               {"-1", "234"},
		1<<63 - 1:           {"9", "223", "372", "036", "854", "775", "807"},
		123456789012345678:  {"123", "456", "789", "012", "345", "678"},
		-123456789012345678: {"-123", "456", "789", "012", "345", "678"},
	} {
		got := digitGroups(n)
		if !slices.Equal(got, want) {
			t.Errorf("digitGroups(%d) = %q, want %q", n, got, want)
		}
		if n >= 0 && strings.Join(got, "") != strings.TrimLeft(strings.Join(want, ""), "-") {
			t.Errorf("digitGroups(%d) does not concatenate back", n)
		}
	}
}
