// Package crosstest runs packages' own tests on another machine than the one go test runs on: a
// package's test binary built for a target (GOARCH, GOAMD64, ...) and run directly or under an
// emulator (qemu-user), with the named tests required to run and pass. It serves the tests that
// check orkpipe where its builders' machines are not: internal/avx2host (a CPU without AVX-512)
// and internal/arm64host/... (the RK3588 board hosts, linux/arm64).
package crosstest

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
)

// Suite is one package's tests (the package relative to the module root, e.g. "ork/pack"): the
// tests named whole, each required to run and pass, or, with none named, the package's tests whole
// but those named in Skip (left out with -test.skip; whoever fills it says why).
type Suite struct {
	Pkg   string
	Tests []string
	Skip  []string
}

// Target says how a suite's test binary is built and run.
type Target struct {
	// Name says where the tests run, for messages ("qemu-aarch64 (linux/arm64)").
	Name string
	// Env is added to the go command's environment for the build (GOARCH=arm64, CGO_ENABLED=0).
	Env []string
	// Wrap is the command line the binary runs under (an emulator and its flags), or none.
	Wrap []string
	// Args are added to the test binary's own (-test.short).
	Args []string
}

// Run builds every suite's test binary for target in one go command (go test -c -o dir/ with all
// the packages: one load of the package graph, the compiles and links in parallel under the go
// command's own limit), then runs each from its package's directory (its testdata, as go test runs
// it), one subtest per suite: a named test that did not run and pass (skipped included), or a run
// without PASS fails the subtest; a build failure fails t before any suite runs. The go command names
// the binaries by their packages' last path elements, which must therefore differ (it refuses
// otherwise, naming the packages).
func Run(t *testing.T, target Target, suites []Suite) {
	t.Helper()
	root := ModuleRoot(t)
	bin := t.TempDir()
	pkgs := make([]string, len(suites))
	for i, s := range suites {
		pkgs[i] = "./" + s.Pkg
	}
	start := time.Now()
	build := exec.Command("go", append([]string{"test", "-c", "-o", bin + string(filepath.Separator)}, pkgs...)...)
	build.Dir = root
	build.Env = append(os.Environ(), target.Env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s go test -c %s: %v\n%s", strings.Join(target.Env, " "), strings.Join(pkgs, " "), err, out)
	}
	t.Logf("%d test binaries built for %s in %v", len(suites), target.Name, time.Since(start).Round(100*time.Millisecond))
	for _, s := range suites {
		t.Run(s.Pkg, func(t *testing.T) {
			exe := filepath.Join(bin, path.Base(s.Pkg)+".test")
			if _, err := os.Stat(exe); err != nil {
				t.Fatalf("./%s: no test binary from go test -c (a package without tests?): %v", s.Pkg, err)
			}
			args := append(append(append([]string(nil), target.Wrap...), exe, "-test.v", "-test.count=1"), target.Args...)
			if len(s.Tests) > 0 {
				args = append(args, "-test.run", "^("+strings.Join(s.Tests, "|")+")$")
			}
			if len(s.Skip) > 0 {
				args = append(args, "-test.skip", "^("+strings.Join(s.Skip, "|")+")$")
			}
			run := exec.Command(args[0], args[1:]...)
			run.Dir = filepath.Join(root, s.Pkg)
			run.Env = append(os.Environ(), testfiles.WrapEnv+"="+strings.Join(target.Wrap, " "))
			out, err := run.CombinedOutput()
			log := string(out)
			if err != nil {
				t.Fatalf("./%s on %s: %v\n%s", s.Pkg, target.Name, err, Tail(log, 60))
			}
			for _, name := range s.Tests {
				if !regexp.MustCompile(`(?m)^--- PASS: ` + name + ` \(`).MatchString(log) {
					t.Errorf("./%s: %s did not run and pass on %s\n%s", s.Pkg, name, target.Name, Tail(log, 30))
				}
			}
			if !strings.Contains(log, "\nPASS\n") {
				t.Errorf("./%s: no PASS on %s\n%s", s.Pkg, target.Name, Tail(log, 30))
			}
		})
	}
}

// LinuxArm64 is the target of the RK3588 board hosts: built as their binary is (CGO_ENABLED=0
// GOOS=linux GOARCH=arm64, README "Install"), run directly on a linux/arm64 machine, else under
// qemu-aarch64 (Emulator: why says what for when it is missing).
func LinuxArm64(t *testing.T, why string) Target {
	t.Helper()
	target := Target{Name: "linux/arm64", Env: []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"}}
	if runtime.GOOS != "linux" || runtime.GOARCH != "arm64" {
		target.Name, target.Wrap = "qemu-aarch64 (linux/arm64)", []string{Emulator(t, "qemu-aarch64", why)}
	}
	return target
}

// RunBoardHost runs suites (Run) on LinuxArm64 with -test.short: the board host's packages' tests
// (internal/arm64host/ork and store).
func RunBoardHost(t *testing.T, suites []Suite) {
	t.Helper()
	target := LinuxArm64(t, "run the board host's packages' tests built for linux/arm64")
	target.Args = []string{"-test.short"}
	Run(t, target, suites)
}

// Emulator returns the path of the qemu-user emulator name (qemu-x86_64, qemu-aarch64); without
// it the test skips, or fails where CI is set (testfiles.Need: .ci/run installs qemu-user).
func Emulator(t *testing.T, name, why string) string {
	t.Helper()
	qemu, err := exec.LookPath(name)
	if err != nil {
		testfiles.Need(t, "%s not found (%v): apt-get install -y qemu-user to %s", name, err, why)
	}
	return qemu
}

// ModuleRoot is the module's directory (go list -m); without the go command the test skips, or
// fails where CI is set.
func ModuleRoot(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		testfiles.Need(t, "the go command is not on PATH (%v): these tests build test binaries", err)
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// Tail is the last n lines of s, without qemu's warnings about host features it does not emulate.
func Tail(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "qemu-") || !strings.Contains(l, ": warning:") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
