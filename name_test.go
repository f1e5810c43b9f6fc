package fence

import (
	"errors"
	"strings"
	"testing"
)

// Lease names print as what they are. Before, only C0 and DEL were refused:
// C1 controls (U+0085 NEL, U+009B CSI, which terminals obey), a bidi
// override (U+202E, which showed "report-ok‮" reversed on the page) and
// zero-width characters were accepted although the docs said control
// characters were refused.
func TestValidateNameRefusesInvisible(t *testing.T) {
	for _, name := range []string{
		"a\u0085b", "a\u009b31mred", "report\u202eko-", "a\u200bb", "a\u2066b\u2069", "\ufeffname",
		"a\u2028b", "a\u00adb", "a\x01b", "a\x7fb",
	} {
		err := ValidateName(name)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalid", name, err)
			continue
		}
		if strings.ContainsFunc(err.Error(), invisibleRune) {
			t.Errorf("the error for %q shows the character raw: %q", name, err)
		}
	}
	for _, name := range []string{"nightly-report", "task:42", "rapport-été", "отчёт", "日次レポート", "a b", "emoji-\U0001F600"} {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}
}
