package binary

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/crosstest"
	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

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
	board := crosstest.LinuxArm64(t, "run the board host's linux/arm64 binary")
	root := crosstest.ModuleRoot(t)
	bin := t.TempDir()
	host, boardBin := filepath.Join(bin, "orkpipe"), filepath.Join(bin, "orkpipe-arm64")
	goBuild(t, root, host, nil)
	goBuild(t, root, boardBin, board.Env)
	checkStatic(t, boardBin)

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
		return run(t, boardDir, env(boardDir), slices.Concat(board.Wrap, []string{boardBin}, args))
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
