package testfiles

import (
	"os"
	"slices"
	"testing"
)

// TestSelfCommand checks the command line SelfCommand starts: the test binary itself, or under the
// command line WrapEnv names (split at spaces).
func TestSelfCommand(t *testing.T) {
	t.Setenv(WrapEnv, "")
	if got, want := SelfCommand("-test.run=^$").Args, []string{os.Args[0], "-test.run=^$"}; !slices.Equal(got, want) {
		t.Errorf("without a wrapper: %q, want %q", got, want)
	}
	t.Setenv(WrapEnv, "qemu-x86_64  -cpu Haswell")
	if got, want := SelfCommand("-test.v").Args, []string{"qemu-x86_64", "-cpu", "Haswell", os.Args[0], "-test.v"}; !slices.Equal(got, want) {
		t.Errorf("under %q: %q, want %q", os.Getenv(WrapEnv), got, want)
	}
}
