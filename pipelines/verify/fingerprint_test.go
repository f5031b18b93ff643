package verify_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/boardhost"
	"orkpipe/pipelines/verify"
)

// libraryOf returns the path ldd prints for a shared library of /bin/ls whose name has prefix.
func libraryOf(t *testing.T, prefix string) string {
	t.Helper()
	out, err := exec.Command("ldd", "/bin/ls").Output()
	if err != nil {
		testfiles.Need(t, "ldd /bin/ls: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasPrefix(f[0], prefix) && f[1] == "=>" {
			return f[2]
		}
	}
	testfiles.Need(t, "/bin/ls does not link %s*: %s", prefix, out)
	return ""
}

// Acceptance 3: the fingerprint lists a real dynamically linked run binary and its shared libraries
// with digests, and changes when one library does.
func TestVerifyFingerprintRunBinary(t *testing.T) {
	dir := fixture(t)
	libc := libraryOf(t, "libc.so")
	cmd := "/bin/ls -l {pack} {stub}"
	env := os.Environ()
	run := func(env []string) *boardhost.Report {
		res, err := verify.Dir(context.Background(), dir,
			verify.WithCollect(boardhost.WithEnv(env)),
			verify.WithRun(cmd, "", boardhost.WithoutScore(), boardhost.WithRunEnv(env)))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Report.OK() {
			t.Fatalf("verify with /bin/ls failed: %+v", res.Report.Checks)
		}
		return res.Report
	}
	a := run(env)
	prog := a.Fingerprint.Program
	if prog == nil || prog.Path != "/bin/ls" && !strings.HasSuffix(prog.Path, "/ls") {
		t.Fatalf("fingerprint program %+v, want /bin/ls", prog)
	}
	roles := map[string]int{}
	var sawLibc boardhost.Object
	for _, o := range prog.Objects {
		roles[o.Role]++
		if !strings.HasPrefix(o.Digest, "blake3:") || o.Size <= 0 {
			t.Errorf("object %+v has no digest or size", o)
		}
		if o.Name == filepath.Base(libc) {
			sawLibc = o
		}
	}
	if roles[boardhost.RoleProgram] != 1 || roles[boardhost.RoleInterpreter] != 1 || roles[boardhost.RoleNeeded] < 1 {
		t.Errorf("roles %v, want the program, the loader and its DT_NEEDED libraries", roles)
	}
	if sawLibc.Path == "" {
		t.Fatalf("libc %s not among %+v", libc, prog.Objects)
	}
	if a.Run == nil || a.Run.Program.Digest != prog.Digest {
		t.Errorf("run program digest %v differs from the fingerprint's %s", a.Run, prog.Digest)
	}

	// The same libc, one byte longer, found first through LD_LIBRARY_PATH: the program digest changes,
	// the machine fingerprint does not (LD_LIBRARY_PATH is recorded in the allow-listed env, so the
	// fingerprint digest changes too: both say what differs).
	libdir := t.TempDir()
	copyFile(t, libc, filepath.Join(libdir, filepath.Base(libc)), []byte{0})
	env2 := append(append([]string(nil), env...), "LD_LIBRARY_PATH="+libdir)
	b := run(env2)
	if b.Fingerprint.Program.Digest == prog.Digest {
		t.Fatal("program digest unchanged after a shared library changed")
	}
	var moved bool
	for _, o := range b.Fingerprint.Program.Objects {
		if o.Name == filepath.Base(libc) {
			moved = o.Path == filepath.Join(libdir, filepath.Base(libc)) && o.Digest != sawLibc.Digest
		}
	}
	if !moved {
		t.Errorf("libc in %+v, want the modified copy in %s with a new digest", b.Fingerprint.Program.Objects, libdir)
	}
	diffs := boardhost.DiffFingerprints(a.Fingerprint, b.Fingerprint)
	if len(diffs) == 0 {
		t.Error("DiffFingerprints found nothing")
	}
}

func copyFile(t *testing.T, src, dst string, extra []byte) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Write(extra)
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
