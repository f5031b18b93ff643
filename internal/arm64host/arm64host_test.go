package arm64host

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/crosstest"
	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// boardEnv is the go command's environment for the board host's builds (README, "Install").
var boardEnv = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"}

// boardSuites are the tests of what the board host's commands run (pull, verify, inspect, hash,
// pack verify): BLAKE3 off amd64 (the portable tree and zeebo's Go code), the orkpack reader and the
// untiling its checks decode through, GGUF headers and stubs, the store's hashes and ingest, the
// board host's fingerprint, verify's checks, and pulls against a real registry (ranges in parallel
// and out of order, holes, attestations, a pull killed three times that resumes). Left out: the
// build side's tests; those that hold a child process's memory or the kernel's page state to a bound
// (under qemu-user the emulator's own pages count, and madvise is not passed on); and registry's
// TestSignedPull (22 s emulated: its refusals are the same Go on both machines, and
// TestBoardHostBinary pulls a signed artifact with --trust and signs an attestation on this binary).
var boardSuites = []crosstest.Suite{
	{Pkg: "internal/blake3x"},
	{Pkg: "ork/pack"},
	{Pkg: "ork/tile"},
	{Pkg: "ork/gguf"},
	{Pkg: "ork/boardhost"},
	{Pkg: "artifacts", Tests: []string{"TestParallelHashMatchesSerial", "TestParallelHashHoles", "TestHashSmall",
		"TestHashFileCachesByStat", "TestHashFileRsyncCase", "TestHashFileErrors", "TestStreamHasher",
		"TestIngestRoundTrip", "TestFlippedByteQuarantined", "TestAdoptDigsHoles", "TestVerifyRemembered"}},
	{Pkg: "pipelines/verify", Tests: []string{"TestVerifyDirGood", "TestVerifyNotABuildDir", "TestVerifyCorruptEntry",
		"TestVerifyStubZeroedNonOwned", "TestVerifyDoesNotFit", "TestVerifyLoaderCoverage", "TestVerifyRunStandIns",
		"TestVerifyFingerprintRunBinary"}},
	{Pkg: "registry", Tests: []string{"TestPullParallelRanges", "TestPullSwappedRanges", "TestEmptyAndHoleOnlyFiles",
		"TestParseManifestRefuses", "TestAttachBoardVerification", "TestPullResumeAfterKill"}},
}

// TestBoardHostPackages runs boardSuites built for linux/arm64 (CGO_ENABLED=0, as the board's
// binary is built) under qemu-aarch64, with -test.short; each named test must run and pass.
func TestBoardHostPackages(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "-short: the board host's packages' tests built for linux/arm64 (minutes under emulation)")
	}
	target := crosstest.Target{Name: "linux/arm64", Env: boardEnv, Args: []string{"-test.short"}}
	if target.Wrap = boardCPU(t, "run the board host's packages' tests built for linux/arm64"); target.Wrap != nil {
		target.Name = "qemu-aarch64 (linux/arm64)"
	}
	crosstest.Run(t, target, boardSuites)
}

// TestBoardHostBinary is the board host's part of a release on the binary it runs there: this
// machine builds the demo recipe and pushes it, signed, to a real registry (distribution, as a child
// process); the static linux/arm64 orkpipe, under qemu-aarch64, makes the board's key, pulls the
// artifact with --trust and verifies it, running the board runtime's stand-in (a shell script test
// double: no NPU here), and attests the report with --sign (README's commands for the board host);
// `inspect`, `hash` and `pack verify` on the pulled files say what this machine's binary says of the
// build's. The build side's `describe --trust` then lists the board's signed verification. Each side
// has its own home and cache.
func TestBoardHostBinary(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "-short: the board host's binary (two builds of orkpipe, one run under emulation)")
	}
	wrap := boardCPU(t, "run the board host's linux/arm64 binary")
	root := crosstest.ModuleRoot(t)
	bin := t.TempDir()
	host, board := filepath.Join(bin, "orkpipe"), filepath.Join(bin, "orkpipe-arm64")
	goBuild(t, root, host, nil)
	goBuild(t, root, board, boardEnv)
	checkStatic(t, board)

	work := t.TempDir()
	hostDir, boardDir := filepath.Join(work, "build"), filepath.Join(work, "board")
	for _, d := range []string{hostDir, boardDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := func(dir string) []string {
		return []string{"HOME=" + filepath.Join(dir, ".home"), "ORKPIPE_CACHE=" + filepath.Join(dir, ".cache")}
	}
	onHost := func(args ...string) string { return run(t, hostDir, env(hostDir), append([]string{host}, args...)) }
	onBoard := func(args ...string) string {
		return run(t, boardDir, env(boardDir), slices.Concat(wrap, []string{board}, args))
	}

	if v := onBoard("version"); !strings.Contains(v, "linux/arm64") || !strings.Contains(v, "numerics go arm64") {
		t.Errorf("the board's orkpipe version does not say linux/arm64 and its numerics:\n%s", v)
	}
	onHost("build", filepath.Join(root, "pipelines", "recipes", "demo.yaml"), "-o", "out")
	onHost("key", "generate", "-o", "release.key")
	reg := regtest.Start(t, nil)
	ref := reg.Ref("packs/demo", "v1")
	onHost("push", "out", ref, "--plain-http", "--sign", "release.key")

	onBoard("key", "generate", "-o", "board.key")
	text := testfiles.Path(t, "tinystories_sample.txt")
	standIn := filepath.Join(root, "ork", "boardhost", "testdata", "fake-llama-perplexity-good.sh")
	onBoard("pull", ref, "-o", "out", "--plain-http", "--trust", filepath.Join(hostDir, "release.key.pub"))
	out := onBoard("verify", "out", "--run", "'"+standIn+"' -m {stub} --ork-pack {pack} -f {text}", "--text", text,
		"--attest", ref, "--plain-http", "--sign", "board.key")
	for _, want := range []string{"verify: PASSED", "PPL 2.6798", "attested " + ref + " as sha256:"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify on the board lacks %q:\n%s", want, out)
		}
	}
	files := []string{"demo.orkpack", "demo.orkpack.gguf", "report.json", "provenance.json", "summary.txt", "report.html"}
	for _, name := range files {
		a, errA := os.ReadFile(filepath.Join(hostDir, "out", name))
		b, errB := os.ReadFile(filepath.Join(boardDir, "out", name))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: the board pulled other bytes than the build wrote (%v, %v)", name, errA, errB)
		}
	}
	// The stub's pack-owned tensors stay holes through the board's pull (the PAX-sparse layer).
	built := testfiles.Allocated(t, filepath.Join(hostDir, "out", "demo.orkpack.gguf"))
	if pulled := testfiles.Allocated(t, filepath.Join(boardDir, "out", "demo.orkpack.gguf")); pulled > built {
		t.Errorf("the board's pulled stub allocates %d bytes, the build's %d: its holes were filled", pulled, built)
	}
	// The same questions, one binary on each machine: the same answers (paths relative, so equal).
	for _, args := range [][]string{
		{"--json", "inspect", "out/demo.orkpack"},
		{"--json", "inspect", "out/demo.orkpack.gguf"},
		append([]string{"hash"}, prefixed("out/", files)...),
	} {
		if h, b := onHost(args...), onBoard(args...); h != b {
			t.Errorf("orkpipe %s: the board's binary says\n%s\nthis machine's\n%s", strings.Join(args, " "), crosstest.Tail(b, 20), crosstest.Tail(h, 20))
		}
	}
	if out := onBoard("pack", "verify", "out/demo.orkpack"); !strings.Contains(out, "ok: orkpack") {
		t.Errorf("pack verify on the board:\n%s", out)
	}
	out = onHost("describe", ref, "--plain-http", "--trust", filepath.Join(boardDir, "board.key.pub"))
	for _, want := range []string{`board "rk3588"`, ": passed", "signed by trusted key", "PPL 2.6798"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe on the build side lacks %q:\n%s", want, out)
		}
	}
}

// boardCPU returns the command line linux/arm64 binaries run under here: none on a linux/arm64
// machine, else qemu-aarch64 (why says what for, in the message when it is missing).
func boardCPU(t *testing.T, why string) []string {
	t.Helper()
	if runtime.GOOS == "linux" && runtime.GOARCH == "arm64" {
		return nil
	}
	return []string{crosstest.Emulator(t, "qemu-aarch64", why)}
}

// goBuild builds cmd/orkpipe into out with env added to the go command's environment.
func goBuild(t *testing.T, root, out string, env []string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, "./cmd/orkpipe")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s go build ./cmd/orkpipe: %v\n%s", strings.Join(env, " "), err, b)
	}
}

// checkStatic fails unless path is a linux/arm64 executable that needs no dynamic loader and no
// shared library: "pull, verify and inspect must need nothing but that static binary" (DESIGN).
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 || f.Type != elf.ET_EXEC {
		t.Errorf("%s: machine %v, type %v: want an AArch64 executable", path, f.Machine, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter (PT_INTERP): not static", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v): not static", path, libs, err)
	}
}

// run runs argv in dir with env added and returns its standard output; a failure fails the test with
// both outputs.
func run(t *testing.T, dir string, env, argv []string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s\n%s", strings.Join(argv, " "), err, crosstest.Tail(stdout.String(), 30), crosstest.Tail(stderr.String(), 30))
	}
	return stdout.String()
}

// prefixed is names each with prefix.
func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}
