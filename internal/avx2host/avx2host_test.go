package avx2host

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"orkpipe/internal/crosstest"
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

// suites are the tests that run each package's AVX2 kernels against their references (each test
// named whole, and each must pass).
var suites = []crosstest.Suite{
	{Pkg: "ork/internal/dgemm", Tests: []string{"TestDgemmMatchesGonum", "TestGramUpperMatchesGonum", "TestNonzero",
		"TestPackedSkipsAsGonum", "TestDtrmmMatchesGonum", "TestDsyrkMatchesGonum", "TestDtrsmMatchesGonum"}},
	{Pkg: "ork/internal/sgemm", Tests: []string{"TestNTMatchesGonum", "TestNNMatchesGonum", "TestDotMatchesKernels",
		"TestNaNPayloads", "TestNTShortRows", "TestPack4", "TestNTRowsMatchesNT",
		"TestNTRowsDecodeError"}},
	{Pkg: "ork/quant", Tests: []string{"TestMatMulIntGroupsBitIdentical", "TestQuantizeActivationsKernels",
		"TestClipErrsKernelMatchesGo", "TestGroupSearch32MatchesGo", "TestRTN32Paths", "TestRowKernels32",
		"TestRowKernelsDone", "TestRowSearch32Lanes", "TestAbsMax32"}},
	{Pkg: "ork/model/internal/softmax"},
	{Pkg: "ork/model/internal/fma"},
	{Pkg: "ork/model/internal/deltanet"},
	{Pkg: "ork/gguf", Tests: []string{"TestDequantQ8_0Kernel"}},
	{Pkg: "ork/calib", Tests: []string{"TestEncodeValuesKernel"}},
	{Pkg: "internal/blake3x", Tests: []string{"TestHash8AVX2", "TestSum256", "TestChunks16", "TestParents16"}},
}

// qemuMaskFaults are the tests qemu-x86_64 cannot run, by package: they put a row before an
// inaccessible page and check that the AVX2 kernels' masked loads and stores (VMASKMOVPS) touch
// nothing past it. A CPU raises no fault for a masked-out lane (Intel SDM, VMASKMOV: "faults will
// not occur due to referencing any memory location if the corresponding mask bit for that memory
// location is 0"); Debian's qemu-user 7.2 faults (SIGSEGV in expShift8, where a real AVX2 CPU passes).
// Every AVX2 build host, with AVX-512 or without, runs them on its own CPU in the package's tests.
var qemuMaskFaults = map[string][]string{"ork/model/internal/softmax": {"TestKernelReadsOnlyItsValues"}}

// emulatedSuites returns suites, under an emulator without qemuMaskFaults' tests.
func emulatedSuites(suites []crosstest.Suite, emulated bool) []crosstest.Suite {
	if !emulated {
		return suites
	}
	out := slices.Clone(suites)
	for i, s := range out {
		out[i].Skip = append(slices.Clone(s.Skip), qemuMaskFaults[s.Pkg]...)
	}
	return out
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
	target := crosstest.Target{Name: "this CPU (AVX2, FMA, no AVX-512)", Args: []string{"-test.short"}}
	if !nativeAVX2Host() {
		target.Name, target.Wrap = "qemu-x86_64 -cpu Haswell", []string{emulator(t), "-cpu", "Haswell"}
	}
	t.Logf("the kernels' tests run on %s", target.Name)
	crosstest.Run(t, target, emulatedSuites(suites, target.Wrap != nil))
}

// nativeAVX2Host reports whether this CPU is the one the test means: AVX2 and FMA, no AVX-512 (so the
// kernels' AVX2 paths are the ones they take, and an AVX-512 instruction on them faults).
func nativeAVX2Host() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA && !cpu.X86.HasAVX512F }

// emulator returns qemu-x86_64's path after checking that its Haswell CPU is what the test means (it
// skips without qemu, or fails when CI is set).
func emulator(t *testing.T) string {
	t.Helper()
	qemu := crosstest.Emulator(t, "qemu-x86_64", "run the kernels' tests on a CPU without AVX-512")
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
