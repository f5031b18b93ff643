package avx2host

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"orkpipe/internal/testfiles"
)

// probeEnv makes this package's test binary print what x/sys/cpu sees and exit: the check that the
// emulated CPU is the one the test means.
const probeEnv = "ORKPIPE_AVX2HOST_PROBE"

func TestMain(m *testing.M) {
	if os.Getenv(probeEnv) != "" {
		fmt.Printf("avx2=%v fma=%v avx512f=%v\n", cpu.X86.HasAVX2, cpu.X86.HasFMA, cpu.X86.HasAVX512F)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// suites are the tests that run each package's AVX2 kernels against their references (packages
// relative to the module; each test named whole, and each must pass).
var suites = []struct {
	pkg   string
	tests []string
}{
	{"ork/internal/dgemm", []string{"TestDgemmMatchesGonum", "TestGramUpperMatchesGonum", "TestNonzero",
		"TestPackedSkipsAsGonum", "TestDtrmmMatchesGonum", "TestDsyrkMatchesGonum", "TestDtrsmMatchesGonum"}},
	{"ork/internal/sgemm", []string{"TestNTMatchesGonum", "TestNNMatchesGonum", "TestDotMatchesKernels",
		"TestNaNPayloads", "TestNTShortRows", "TestPack4", "TestNTRowsMatchesNT",
		"TestNTRowsDecodeError"}},
	{"ork/quant", []string{"TestMatMulIntGroupsBitIdentical", "TestQuantizeActivationsKernels",
		"TestClipErrsKernelMatchesGo", "TestGroupSearch32MatchesGo", "TestRTN32Paths", "TestRowKernels32",
		"TestRowKernelsDone", "TestRowSearch32Lanes", "TestAbsMax32"}},
	{"ork/model/internal/softmax", nil},
	{"ork/model/internal/fma", nil},
	{"ork/model/internal/deltanet", nil},
	{"ork/gguf", []string{"TestDequantQ8_0Kernel"}},
	{"ork/calib", []string{"TestEncodeValuesKernel"}},
	{"internal/blake3x", []string{"TestHash8AVX2", "TestSum256", "TestChunks16", "TestParents16"}},
}

// TestKernelsWithoutAVX512 builds each suite's package tests and runs them on a CPU without AVX-512,
// with -test.short (the longest of them try fewer layouts): on this CPU itself when it has AVX2 and FMA
// and no AVX-512 (a Zen 2 or 3 build host), else under qemu-x86_64 -cpu Haswell (Debian's qemu-user;
// .ci/run installs it, and with CI set its absence fails the test) after checking that the emulated
// CPU has AVX2 and no AVX-512. A suite without named tests runs its package's tests whole; a named test
// that did not run and pass (or skipped) fails.
func TestKernelsWithoutAVX512(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testfiles.SkipBuild(t, "GOARCH %s: the AVX2 kernels are amd64's", runtime.GOARCH)
	}
	if testing.Short() {
		testfiles.SkipShort(t, "-short: the kernels' tests again on a CPU without AVX-512 (minutes under emulation)")
	}
	cpuName, wrap := "this CPU (AVX2, FMA, no AVX-512)", []string(nil)
	if !nativeAVX2Host() {
		qemu := emulator(t)
		cpuName, wrap = "qemu-x86_64 -cpu Haswell", []string{qemu, "-cpu", "Haswell"}
	}
	t.Logf("the kernels' tests run on %s", cpuName)
	root := moduleRoot(t)
	bin := t.TempDir()
	for _, s := range suites {
		t.Run(s.pkg, func(t *testing.T) {
			exe := filepath.Join(bin, strings.ReplaceAll(s.pkg, "/", "_")+".test")
			build := exec.Command("go", "test", "-c", "-o", exe, "./"+s.pkg)
			build.Dir = root
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go test -c ./%s: %v\n%s", s.pkg, err, out)
			}
			args := append(append([]string(nil), wrap...), exe, "-test.v", "-test.count=1", "-test.short")
			if len(s.tests) > 0 {
				args = append(args, "-test.run", "^("+strings.Join(s.tests, "|")+")$")
			}
			run := exec.Command(args[0], args[1:]...)
			run.Dir = filepath.Join(root, s.pkg) // the package's testdata, as go test runs it
			out, err := run.CombinedOutput()
			log := string(out)
			if err != nil {
				t.Fatalf("./%s on %s: %v\n%s", s.pkg, cpuName, err, tail(log, 60))
			}
			for _, name := range s.tests {
				if !regexp.MustCompile(`(?m)^--- PASS: ` + name + ` \(`).MatchString(log) {
					t.Errorf("./%s: %s did not run and pass on %s\n%s", s.pkg, name, cpuName, tail(log, 30))
				}
			}
			if !strings.Contains(log, "\nPASS\n") {
				t.Errorf("./%s: no PASS on %s\n%s", s.pkg, cpuName, tail(log, 30))
			}
		})
	}
}

// nativeAVX2Host reports whether this CPU is the one the test means: AVX2 and FMA, no AVX-512 (so the
// kernels' AVX2 paths are the ones they take, and an AVX-512 instruction on them faults).
func nativeAVX2Host() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA && !cpu.X86.HasAVX512F }

// emulator returns qemu-x86_64's path after checking that its Haswell CPU is what the test means (it
// skips without qemu, or fails when CI is set).
func emulator(t *testing.T) string {
	t.Helper()
	qemu, err := exec.LookPath("qemu-x86_64")
	if err != nil {
		testfiles.Need(t, "qemu-x86_64 not found (%v): apt-get install -y qemu-user to run the kernels' tests on a CPU without AVX-512", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe := exec.Command(qemu, "-cpu", "Haswell", self)
	probe.Env = append(os.Environ(), probeEnv+"=1")
	out, err := probe.Output()
	if err != nil {
		t.Fatalf("%s -cpu Haswell %s: %v", qemu, self, err)
	}
	if got := strings.TrimSpace(string(out)); got != "avx2=true fma=true avx512f=false" {
		t.Fatalf("the emulated CPU: %q, want AVX2 and FMA without AVX-512", got)
	}
	return qemu
}

// moduleRoot is the module's directory (go list -m).
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// tail is the last n lines of s, without qemu's warnings about host features TCG does not emulate.
func tail(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "qemu-x86_64: warning:") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
