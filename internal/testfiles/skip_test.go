package testfiles

import (
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records a skip or a failure and, as testing's own, ends the calling
// goroutine there (runtime.Goexit). Its other methods are the nil TB's: a call of one panics.
type recorder struct {
	testing.TB
	skipped, failed string
	returned        bool // the function under test returned: neither skipped nor failed
}

func (r *recorder) Helper()          {}
func (r *recorder) Skip(args ...any) { r.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) { r.failed = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// record runs f on a recorder in a goroutine of its own and returns what f did.
func record(f func(tb testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
		r.returned = true
	}()
	<-done
	return r
}

// setShort sets -test.short for the rest of t, as go test -short would have.
func setShort(t *testing.T, on bool) {
	t.Helper()
	f := flag.Lookup("test.short")
	old := f.Value.String()
	if err := f.Value.Set(fmt.Sprint(on)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Value.Set(old) })
}

// classes are the skipping calls, one a class, each with the message it skips with (its class's
// prefix, then its format filled in).
var classes = []struct {
	class string
	call  func(tb testing.TB)
	want  string
}{
	{"cpu", func(tb testing.TB) { SkipCPU(tb, "no %s on this CPU", "AVX-512") }, "skip (cpu): no AVX-512 on this CPU"},
	{"build", func(tb testing.TB) { SkipBuild(tb, "a -race build: %d", 1) }, "skip (build): a -race build: 1"},
	{"short", func(tb testing.TB) { SkipShort(tb, "writes %d MiB", 640) }, "skip (short): writes 640 MiB"},
	{"long", func(tb testing.TB) { Long(tb, "GPTQ at K >= 4096") }, "skip (long): GPTQ at K >= 4096: set ORKPIPE_LONG_TESTS=1 to run the long tests"},
	{"optional", func(tb testing.TB) { SkipOptional(tb, "oras not on PATH (%s)", "go install") }, "skip (optional): oras not on PATH (go install)"},
	{"helper", func(tb testing.TB) { SkipHelper(tb, "TestPullResumeAfterKill") }, "skip (helper): helper process of TestPullResumeAfterKill"},
	{"need", func(tb testing.TB) { Need(tb, "strace not found (%v): apt-get install strace", "exec: not found") }, "skip (need): strace not found (exec: not found): apt-get install strace"},
}

// TestClassesSkipOutsideCI: outside CI every class skips (the short one under -short, the long one
// without ORKPIPE_LONG_TESTS) with its message behind "skip (class): ", and nothing fails.
func TestClassesSkipOutsideCI(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv(LongTestsEnv, "")
	setShort(t, true)
	for _, c := range classes {
		r := record(c.call)
		if r.skipped != c.want || r.failed != "" || r.returned {
			t.Errorf("%s: skipped %q, failed %q, returned %v; want skipped %q", c.class, r.skipped, r.failed, r.returned, c.want)
		}
	}
}

// TestClassesInCI: in CI (CI set) every class skips as outside it, except Need, which fails with
// its message and says that CI must provide what the test needs.
func TestClassesInCI(t *testing.T) {
	t.Setenv("CI", "true")
	t.Setenv(LongTestsEnv, "")
	setShort(t, true)
	for _, c := range classes {
		r := record(c.call)
		if c.class == "need" {
			if msg := strings.TrimPrefix(c.want, "skip (need): "); !strings.Contains(r.failed, msg) || !strings.Contains(r.failed, "CI must provide") ||
				r.skipped != "" || r.returned {
				t.Errorf("need in CI: failed %q, skipped %q, returned %v; want a failure saying %q and that CI must provide it", r.failed, r.skipped, r.returned, msg)
			}
			continue
		}
		if r.skipped != c.want || r.failed != "" || r.returned {
			t.Errorf("%s in CI: skipped %q, failed %q, returned %v; want skipped %q", c.class, r.skipped, r.failed, r.returned, c.want)
		}
	}
}

// TestSkipShortOnlyUnderShort: SkipShort called without -short fails the test (a misuse of the class),
// outside CI and in it.
func TestSkipShortOnlyUnderShort(t *testing.T) {
	setShort(t, false)
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := record(func(tb testing.TB) { SkipShort(tb, "writes 640 MiB") })
		if !strings.Contains(r.failed, "without -short") || !strings.Contains(r.failed, "writes 640 MiB") || r.skipped != "" || r.returned {
			t.Errorf("CI=%q: SkipShort without -short: failed %q, skipped %q, returned %v; want a failure", ci, r.failed, r.skipped, r.returned)
		}
	}
}

// TestLongRunsWhenAsked: with ORKPIPE_LONG_TESTS set Long returns and the test runs, in CI too.
func TestLongRunsWhenAsked(t *testing.T) {
	t.Setenv(LongTestsEnv, "1")
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		if r := record(func(tb testing.TB) { Long(tb, "two builds") }); !r.returned || r.skipped != "" || r.failed != "" {
			t.Errorf("CI=%q, %s=1: skipped %q, failed %q; want the test to run", ci, LongTestsEnv, r.skipped, r.failed)
		}
	}
	if !LongTests() {
		t.Errorf("LongTests with %s=1: false", LongTestsEnv)
	}
}

// TestDirIsNeeded: Dir without the shared test data follows Need: a skip naming ORKPIPE_TESTDATA
// outside CI, a failure in CI.
func TestDirIsNeeded(t *testing.T) {
	t.Setenv("ORKPIPE_TESTDATA", filepath.Join(t.TempDir(), "absent"))
	t.Setenv("CI", "")
	if r := record(func(tb testing.TB) { Dir(tb) }); !strings.HasPrefix(r.skipped, "skip (need): shared test data not found") ||
		!strings.Contains(r.skipped, "ORKPIPE_TESTDATA") || r.failed != "" {
		t.Errorf("outside CI: skipped %q, failed %q; want a need skip naming ORKPIPE_TESTDATA", r.skipped, r.failed)
	}
	t.Setenv("CI", "1")
	if r := record(func(tb testing.TB) { Dir(tb) }); !strings.Contains(r.failed, "shared test data not found") ||
		!strings.Contains(r.failed, "CI must provide") || r.skipped != "" {
		t.Errorf("in CI: failed %q, skipped %q; want a failure", r.failed, r.skipped)
	}
}
