// Package testfiles locates the shared, read-only test data folder (../shared/testdata relative
// to the repository root) for tests. The files there are never copied into the repository. It also
// reads the process's own status file, whose peak RSS (VmHWM) the memory tests measure (StatusKB),
// and (Linux) maps values that end at an inaccessible page for kernels' bounds (FloatsBeforeGuard),
// and starts a test's own binary again for the tests that need a child process (SelfCommand).
//
// It holds the tests' skip policy, too: a test skips only for a reason that is legitimately absent
// where it runs, and every skip names its class, which decides what CI (InCI: the environment
// variable CI set) does:
//
//	class     call          the reason                                           in CI
//	cpu       SkipCPU       the CPU lacks a feature the subject needs            skips
//	build     SkipBuild     this build does not run the subject                  skips
//	short     SkipShort     -short leaves the test out (without -short: fails)   skips
//	long      Long          ORKPIPE_LONG_TESTS is not set                        skips
//	optional  SkipOptional  an optional tool or fixture CI does not provide      skips
//	helper    SkipHelper    a subprocess's entry point, run as a test            skips
//	need      Need          anything else the machine is expected to provide     fails
//
// Each skip's message begins "skip (class): ", so a go test -v log can be searched for a class
// ("skip (need)"). No test calls Skip, Skipf or SkipNow itself: internal/depcheck's TestNoRawSkips
// fails on such a call anywhere in the module but skip.go.
package testfiles

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the absolute path of the shared test data folder. Where the folder is absent the
// test is skipped with a message saying so — except in CI (CI set), where it is a failure (Need).
// ORKPIPE_TESTDATA overrides the location.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, err := find()
	if err != nil {
		Need(tb, "shared test data not found (%v): place it at ../shared/testdata beside the repository or set ORKPIPE_TESTDATA", err)
	}
	return dir
}

// Path returns the absolute path of one file in the shared test data folder (see Dir).
func Path(tb testing.TB, name string) string {
	tb.Helper()
	p := filepath.Join(Dir(tb), name)
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("shared test data file %s: %v", p, err)
	}
	return p
}

func find() (string, error) {
	if env := os.Getenv("ORKPIPE_TESTDATA"); env != "" {
		if _, err := os.Stat(env); err != nil {
			return "", err
		}
		return filepath.Abs(env)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			td := filepath.Join(dir, "..", "shared", "testdata")
			if _, err := os.Stat(td); err != nil {
				return "", err
			}
			return filepath.Abs(td)
		}
		if filepath.Dir(dir) == dir {
			return "", os.ErrNotExist
		}
	}
}
