package testfiles

import (
	"fmt"
	"os"
	"testing"
)

// LongTestsEnv is the environment variable that turns the long tests on (any non-empty value): the
// tests that take minutes or gigabytes, which go test ./... and CI leave out (Long).
const LongTestsEnv = "ORKPIPE_LONG_TESTS"

// InCI reports whether the tests run in CI: the environment variable CI is set (non-empty), as CI
// runners set it. There, what Need asks for must be present.
func InCI() bool { return os.Getenv("CI") != "" }

// LongTests reports whether LongTestsEnv is set: the long tests run, and a test may add its long
// cases.
func LongTests() bool { return os.Getenv(LongTestsEnv) != "" }

// SkipCPU skips the test because the CPU lacks a feature its subject needs (AVX-512, AVX2, FMA,
// F16C, VNNI: the kernel under test never runs on this CPU), everywhere, CI included. The message
// says what is missing and what runs instead.
func SkipCPU(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Skip("skip (cpu): " + fmt.Sprintf(format, args...))
}

// SkipBuild skips the test because this build does not run its subject (another GOOS or GOARCH, a
// -race build, -tags blas or its absence, files not mapped on this OS), everywhere, CI included:
// the subject is checked by the builds that run it.
func SkipBuild(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Skip("skip (build): " + fmt.Sprintf(format, args...))
}

// SkipShort skips the test under -short (go test -short), saying what the short run leaves out.
// Called without -short it fails the test: the class is the short run's only, never a way to skip
// elsewhere, so a caller checks testing.Short first.
func SkipShort(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if !testing.Short() {
		tb.Fatal("testfiles.SkipShort called without -short (" + msg + "): the short class skips only under -short; check testing.Short() first")
	}
	tb.Skip("skip (short): " + msg)
}

// Long skips the test unless LongTestsEnv (ORKPIPE_LONG_TESTS) is set, everywhere, CI included:
// what says what the long test does and costs ("GPTQ at K >= 4096: seconds each, ..."); the message
// adds how to run it. With the variable set it returns and the test runs.
func Long(tb testing.TB, what string) {
	tb.Helper()
	if !LongTests() {
		tb.Skip("skip (long): " + what + ": set " + LongTestsEnv + "=1 to run the long tests")
	}
}

// SkipOptional skips the test because an optional external tool or fixture is absent: one CI does
// not provide and the repository does not ship (a Dagger engine, oras, modctl, llama.cpp's models
// folder, ORKPIPE_EXTRA_FIXTURES), everywhere, CI included. The message names what to install or
// set.
func SkipOptional(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Skip("skip (optional): " + fmt.Sprintf(format, args...))
}

// SkipHelper skips a test function that is no test but a subprocess's entry point, when it runs as
// a test (its subprocess's environment absent); parent names the test that starts the subprocess.
func SkipHelper(tb testing.TB, parent string) {
	tb.Helper()
	tb.Skip("skip (helper): helper process of " + parent)
}

// Need is the class of everything else a test needs from the machine that the other classes do
// not cover: a tool CI installs (strace, chromium, Graphviz's dot, qemu-user (qemu-aarch64, and qemu-x86_64 on a CPU with AVX-512),
// tar, dd, a C compiler, ldd), /proc's files, a filesystem that makes and punches holes, enough
// free memory, the go command, the shared test data. Outside CI it skips the test with the message,
// which should say how to provide it; in CI (InCI) it fails the test with the same message: CI must
// provide what a test needs, and a skip there would hide that the test never ran.
func Need(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		tb.Fatal("need: " + msg + "; CI is set, and CI must provide what this test needs (testfiles.Need)")
	}
	tb.Skip("skip (need): " + msg)
}
