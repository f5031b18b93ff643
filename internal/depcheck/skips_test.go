package depcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNoRawSkips: no test of the module calls Skip, Skipf or SkipNow itself; every skip goes through
// internal/testfiles's classes, which name the reason and decide what CI does (RawSkips).
func TestNoRawSkips(t *testing.T) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	calls, err := RawSkips(strings.TrimSpace(string(root)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		t.Errorf("%s: a skip names its class: call testfiles.SkipCPU (the CPU lacks a feature), SkipBuild (this build does not run the subject), "+
			"SkipShort (-short), Long (ORKPIPE_LONG_TESTS), SkipOptional (a tool or fixture CI does not provide), SkipHelper (a subprocess's entry point) "+
			"or Need (anything CI provides: it fails there) instead (internal/testfiles/skip.go)", c)
	}
}

// TestRawSkipsCatches runs RawSkips over a small tree: the calls of Skip, Skipf and SkipNow on any
// receiver are reported by file and line; the skip classes' calls, a field named Skip, the policy's
// own file, testdata and a folder of another module are not.
func TestRawSkipsCatches(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example\n")
	write("a/a_test.go", `package a

import "testing"

func TestA(t *testing.T) {
	t.Skip("x")
}

func BenchmarkA(b *testing.B) {
	b.Run("k", func(b *testing.B) { b.Skipf("no %s", "AVX2") })
}

func FuzzA(f *testing.F) {
	f.SkipNow()
}

func helper(tb testing.TB, s struct{ t *testing.T }) {
	s.t.Skip()
}
`)
	write("a/ok_test.go", `package a

import (
	"testing"

	"example/internal/testfiles"
)

type params struct{ Skip []string }

func TestOK(t *testing.T) {
	testfiles.SkipCPU(t, "no AVX-512 on this CPU")
	testfiles.Need(t, "strace not found")
	var p params
	_ = p.Skip
	t.Skipped()
}
`)
	write("internal/testfiles/skip.go", "package testfiles\n\nimport \"testing\"\n\nfunc SkipCPU(tb testing.TB, f string, a ...any) { tb.Skip() }\n")
	write("a/testdata/x.go", "package x\n\nfunc f(t T) { t.Skip() }\n")
	write("tools/go.mod", "module tools\n")
	write("tools/t_test.go", "package tools\n\nfunc f(t T) { t.Skip() }\n")
	got, err := RawSkips(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a/a_test.go:6: t.Skip(...)", "a/a_test.go:10: b.Skipf(...)", "a/a_test.go:14: f.SkipNow(...)", "a/a_test.go:18: ….Skip(...)"}
	if !slices.Equal(got, want) {
		t.Errorf("RawSkips:\n%q\nwant\n%q", got, want)
	}
	write("b/bad.go", "package b\n\nfunc f( {\n")
	if _, err := RawSkips(root); err == nil || !strings.Contains(err.Error(), "b/bad.go") {
		t.Errorf("a file that does not parse: %v, want an error naming it", err)
	}
}
