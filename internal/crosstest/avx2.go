package crosstest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"orkpipe/internal/testfiles"
)

// avx2ProbeEnv makes a test binary whose TestMain is MainWithoutAVX512 print what x/sys/cpu sees and
// exit: the check that the emulated CPU is the one the tests mean.
const avx2ProbeEnv = "ORKPIPE_AVX2HOST_PROBE"

// MainWithoutAVX512 is the TestMain of the internal/avx2host packages: with avx2ProbeEnv set the
// binary prints the CPU's AVX2, FMA and AVX-512 flags and exits (emulatorHaswell's probe), else it
// runs the tests.
func MainWithoutAVX512(m *testing.M) {
	if os.Getenv(avx2ProbeEnv) != "" {
		fmt.Printf("avx2=%v fma=%v avx512f=%v\n", cpu.X86.HasAVX2, cpu.X86.HasFMA, cpu.X86.HasAVX512F)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// qemuMaskFaults are the tests qemu-x86_64 cannot run, by package: they put a row before an
// inaccessible page and check that the AVX2 kernels' masked loads and stores (VMASKMOVPS) touch
// nothing past it. A CPU raises no fault for a masked-out lane (Intel SDM, VMASKMOV: "faults will
// not occur due to referencing any memory location if the corresponding mask bit for that memory
// location is 0"); Debian's qemu-user 7.2 faults (SIGSEGV in softmax's expShift8, where a real AVX2
// CPU passes). Every AVX2 build host, with AVX-512 or without, runs them on its own CPU in the
// package's own tests.
var qemuMaskFaults = map[string][]string{"ork/model/internal/softmax": {"TestKernelReadsOnlyItsValues"}}

// RunWithoutAVX512 runs suites (Run), with -test.short (the longest of them try fewer layouts), on a
// CPU without AVX-512: this CPU itself when it has AVX2 and FMA and no AVX-512 (a Zen 2 or 3 build
// host), else under qemu-x86_64 -cpu Haswell (Debian's qemu-user; .ci/run installs it, and with CI
// set its absence fails the test) after checking that the emulated CPU has AVX2 and no AVX-512, and
// then without qemuMaskFaults' tests. The calling package's TestMain must be MainWithoutAVX512.
func RunWithoutAVX512(t *testing.T, suites []Suite) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		testfiles.SkipBuild(t, "GOARCH %s: the AVX2 kernels are amd64's", runtime.GOARCH)
	}
	if testing.Short() {
		testfiles.SkipShort(t, "-short: the kernels' tests again on a CPU without AVX-512 (minutes under emulation)")
	}
	target := Target{Name: "this CPU (AVX2, FMA, no AVX-512)", Args: []string{"-test.short"}}
	if !(cpu.X86.HasAVX2 && cpu.X86.HasFMA && !cpu.X86.HasAVX512F) {
		target.Name, target.Wrap = "qemu-x86_64 -cpu Haswell", []string{emulatorHaswell(t), "-cpu", "Haswell"}
		suites = slices.Clone(suites)
		for i, s := range suites {
			suites[i].Skip = append(slices.Clone(s.Skip), qemuMaskFaults[s.Pkg]...)
		}
	}
	t.Logf("the kernels' tests run on %s", target.Name)
	Run(t, target, suites)
}

// emulatorHaswell returns qemu-x86_64's path after checking that its Haswell CPU is what the tests
// mean (it skips without qemu, or fails when CI is set).
func emulatorHaswell(t *testing.T) string {
	t.Helper()
	qemu := Emulator(t, "qemu-x86_64", "run the kernels' tests on a CPU without AVX-512")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe := exec.Command(qemu, "-cpu", "Haswell", self)
	probe.Env = append(os.Environ(), avx2ProbeEnv+"=1")
	out, err := probe.Output()
	if err != nil {
		t.Fatalf("%s -cpu Haswell %s: %v", qemu, self, err)
	}
	if got := strings.TrimSpace(string(out)); got != "avx2=true fma=true avx512f=false" {
		t.Fatalf("the emulated CPU: %q, want AVX2 and FMA without AVX-512", got)
	}
	return qemu
}
