package boardhost

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

// ldd returns the loader's own resolution (name -> real path) of path's shared objects under
// env, by running the system's ldd; the test is skipped where there is none.
func ldd(t *testing.T, path string, env []string) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("ldd"); err != nil {
		testfiles.Need(t, "no ldd on this machine to cross-check the loader search")
	}
	cmd := exec.Command("ldd", path)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", path, err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), " => ")
		if !ok {
			continue
		}
		p, _, _ := strings.Cut(rest, " (")
		if p == "not found" {
			m[name] = ""
			continue
		}
		m[name] = realPath(t, p)
	}
	return m
}

func realPath(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// needed returns name -> real path of the program's needed/preload objects.
func needed(t *testing.T, p *Program) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, o := range p.Objects {
		if o.Role == RoleNeeded || o.Role == RolePreload {
			if o.Path == "" {
				m[o.Name] = ""
			} else {
				m[o.Name] = realPath(t, o.Path)
			}
		}
	}
	return m
}

func object(p *Program, name string) (Object, bool) {
	for _, o := range p.Objects {
		if o.Name == name {
			return o, true
		}
	}
	return Object{}, false
}

func TestResolveProgramLS(t *testing.T) {
	p, err := ResolveProgram(context.Background(), "ls", WithResolveEnv([]string{"PATH=/usr/bin:/bin"}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Objects[0].Role != RoleProgram || p.Objects[0].Name != "ls" || !filepath.IsAbs(p.Path) {
		t.Fatalf("program = %+v", p.Objects[0])
	}
	libc, ok := object(p, "libc.so.6")
	if !ok || libc.Path == "" || libc.Role != RoleNeeded {
		t.Fatalf("libc.so.6 not found in %+v", p.Objects)
	}
	want, err := hashFile(context.Background(), libc.Path)
	if err != nil {
		t.Fatal(err)
	}
	if libc.Digest != want.Digest || libc.Size != want.Size || libc.Size < 100<<10 {
		t.Errorf("libc %+v, want digest %s size %d", libc, want.Digest, want.Size)
	}
	var interp bool
	for _, o := range p.Objects {
		interp = interp || o.Role == RoleInterpreter && o.Digest != ""
	}
	if !interp || !validDigest(p.Digest) || p.Digest != programDigest(p.Objects) || len(p.Unresolved()) > 0 {
		t.Errorf("interpreter %t digest %s unresolved %v", interp, p.Digest, p.Unresolved())
	}
	// Our search agrees with the loader's, object for object.
	if got, want := needed(t, p), ldd(t, p.Path, os.Environ()); !equalMaps(got, want) {
		t.Errorf("resolved %v\nldd says %v", got, want)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestProgramDigestFollowsLibrary copies a real binary and its libc into a temp tree, points
// LD_LIBRARY_PATH at the copy, and checks that the copy is what gets hashed and that modifying
// it changes the program digest (and nothing else).
func TestProgramDigestFollowsLibrary(t *testing.T) {
	ctx := context.Background()
	orig, err := ResolveProgram(ctx, "/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	libc, ok := object(orig, "libc.so.6")
	if !ok || libc.Path == "" {
		t.Fatalf("no libc in %+v", orig.Objects)
	}
	dir := t.TempDir()
	bin, lib := filepath.Join(dir, "bin", "ls"), filepath.Join(dir, "lib", "libc.so.6")
	copyFile(t, orig.Path, bin, 0o755)
	copyFile(t, libc.Path, lib, 0o644)
	env := []string{"PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=" + filepath.Dir(lib)}

	before, err := ResolveProgram(ctx, bin, WithResolveEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := object(before, "libc.so.6"); got.Path != lib || got.Digest != libc.Digest {
		t.Fatalf("libc resolved to %+v, want the copy %s with the original's digest", got, lib)
	}
	if before.Digest != orig.Digest {
		t.Errorf("identical bytes at another path must give the same digest: %s vs %s", before.Digest, orig.Digest)
	}
	if got, want := needed(t, before), ldd(t, bin, env); !equalMaps(got, want) {
		t.Errorf("resolved %v\nldd says %v", got, want)
	}
	// The copied binary really runs with the copied libc.
	run := exec.Command(bin, "--version")
	run.Env = env
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("copied ls does not run: %v: %s", err, out)
	}

	f, err := os.OpenFile(lib, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("patched")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	after, err := ResolveProgram(ctx, bin, WithResolveEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	if after.Digest == before.Digest {
		t.Fatal("program digest unchanged after modifying its libc")
	}
	diff := diffPrograms(before, after)
	if len(diff) != 1 || diff[0].Part != "program: needed libc.so.6" {
		t.Errorf("diff = %v, want only libc.so.6", diff)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// TestResolveRpathRunpath builds a real program and library with the system C compiler and
// checks the search order against the loader's: DT_RUNPATH=$ORIGIN/../lib loses to
// LD_LIBRARY_PATH, DT_RPATH=$ORIGIN/../lib wins over it.
func TestResolveRpathRunpath(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		testfiles.Need(t, "no C compiler to build a test program with RPATH/RUNPATH")
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	libSrc := write("probe.c", "int ork_probe(void) { return 7; }\n")
	mainSrc := write("main.c", "int ork_probe(void);\nint main(void) { return ork_probe() == 7 ? 0 : 1; }\n")
	build := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, out)
		}
	}
	for _, d := range []string{"app/bin", "app/lib", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bundled, other := filepath.Join(dir, "app/lib/libprobe.so"), filepath.Join(dir, "other/libprobe.so")
	build("-shared", "-fPIC", "-o", bundled, libSrc)
	build("-shared", "-fPIC", "-o", other, libSrc)
	f, _ := os.OpenFile(other, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte("other copy"))
	f.Close()

	for _, tc := range []struct {
		dtags    string
		withLDLP bool
		wantPath string
	}{
		{"--enable-new-dtags", false, bundled}, // RUNPATH $ORIGIN
		{"--enable-new-dtags", true, other},    // LD_LIBRARY_PATH before RUNPATH
		{"--disable-new-dtags", true, bundled}, // RPATH before LD_LIBRARY_PATH
	} {
		bin := filepath.Join(dir, "app/bin", "probe"+tc.dtags)
		build("-o", bin, mainSrc, "-L"+filepath.Dir(bundled), "-lprobe", "-Wl,"+tc.dtags, "-Wl,-rpath,$ORIGIN/../lib")
		env := []string{"PATH=/usr/bin:/bin"}
		if tc.withLDLP {
			env = append(env, "LD_LIBRARY_PATH="+filepath.Dir(other))
		}
		p, err := ResolveProgram(context.Background(), bin, WithResolveEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := object(p, "libprobe.so")
		if got.Path != tc.wantPath {
			t.Errorf("%s, LD_LIBRARY_PATH %t: libprobe.so -> %q, want %q", tc.dtags, tc.withLDLP, got.Path, tc.wantPath)
		}
		if lp := ldd(t, bin, env)["libprobe.so"]; lp != realPath(t, tc.wantPath) {
			t.Errorf("%s: ldd says %q, test expects %q", tc.dtags, lp, tc.wantPath)
		}
		run := exec.Command(bin)
		run.Env = env
		if err := run.Run(); err != nil {
			t.Errorf("%s: the built program does not run: %v", tc.dtags, err)
		}
	}
}

func TestResolveProgramErrorsAndUnresolved(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "data.bin")
	os.WriteFile(notExec, []byte("\x00\x01 not an ELF"), 0o755)
	for _, tc := range []struct{ name, argv0 string }{
		{"missing", filepath.Join(dir, "nope")},
		{"not in PATH", "no-such-runtime-xyz"},
		{"neither ELF nor script", notExec},
	} {
		if _, err := ResolveProgram(context.Background(), tc.argv0, WithResolveEnv([]string{"PATH=" + dir})); !errors.Is(err, ErrProgram) {
			t.Errorf("%s: err = %v, want ErrProgram", tc.name, err)
		}
	}
	// A preloaded object that does not exist is recorded as unresolved, not an error.
	p, err := ResolveProgram(context.Background(), "/bin/ls", WithResolveEnv([]string{"LD_PRELOAD=libork-missing.so"}))
	if err != nil {
		t.Fatal(err)
	}
	if un := p.Unresolved(); len(un) != 1 || un[0] != "libork-missing.so" {
		t.Errorf("unresolved = %v", un)
	}
}
