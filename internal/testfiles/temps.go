package testfiles

import (
	"os"
	"syscall"
	"testing"
)

// DeadAndLiveTemps writes content to the temp files dead and live and holds an exclusive flock on
// live until the test ends: live stands for the temp file of a writer still running, dead for one
// a killed writer left (its lock gone with its process). A sweep of their directory must remove
// dead and keep live.
func DeadAndLiveTemps(tb testing.TB, dead, live string, content []byte) {
	tb.Helper()
	for _, p := range []string{dead, live} {
		if err := os.WriteFile(p, content, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	f, err := os.Open(live)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		tb.Fatal(err)
	}
}

// DirNames returns the names of the entries of dir, sorted by name.
func DirNames(tb testing.TB, dir string) []string {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
