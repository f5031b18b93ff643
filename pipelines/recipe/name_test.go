package recipe

import (
	"regexp"
	"strings"
	"testing"
)

// FuzzValidName: validName accepts exactly what the regexp of its contract accepts.
func FuzzValidName(f *testing.F) {
	re := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	for _, s := range []string{"", "a", "0", "-a", ".a", "_a", "qwen3.5-27b_w4", "A", "a b", "a/b", "é", "a\xff",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "a\n", "z9.-_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validName(s), re.MatchString(s); got != want {
			t.Fatalf("validName(%q) = %v, the regexp says %v", s, got, want)
		}
	})
}
