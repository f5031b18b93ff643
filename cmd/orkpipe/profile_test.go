package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProfiles: --memprofile and --cpuprofile each write a pprof profile of the command once main's
// finishProfile runs, and a file that cannot be created is a usage error before the command runs.
func TestProfiles(t *testing.T) {
	dir := t.TempDir()
	hello := filepath.Join(dir, "hello.txt")
	if err := os.WriteFile(hello, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	memP, cpuP := filepath.Join(dir, "mem.pprof"), filepath.Join(dir, "cpu.pprof")
	var out, errb bytes.Buffer
	opts := newGlobalOptions(&out, &errb)
	root := newRootCommand(opts)
	root.SetArgs([]string{"--cache", filepath.Join(dir, "cache"), "--memprofile", memP, "--cpuprofile", cpuP, "hash", hello})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("hash: %v\n%s", err, errb.String())
	}
	if err := opts.finishProfile(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]string{memP: {"alloc_space", "inuse_space"}, cpuP: {"samples", "cpu"}} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f) // pprof's format: a gzipped protocol buffer
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(zr)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, w := range want {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s: no sample type %q in %d bytes", path, w, len(b))
			}
		}
	}

	// An unwritable --memprofile fails before the command, and stops the CPU profile it started: a
	// second CPU profile can start.
	bad := filepath.Join(dir, "missing", "mem.pprof")
	_, errOut, code := orkpipeExit(t, "--cpuprofile", cpuP, "--memprofile", bad, "hash", hello)
	if code != exitUsage || !strings.Contains(errOut, "--memprofile") {
		t.Errorf("unwritable --memprofile: exit %d, %q", code, errOut)
	}
	opts = newGlobalOptions(&out, &errb)
	root = newRootCommand(opts)
	root.SetArgs([]string{"--cache", filepath.Join(dir, "cache"), "--cpuprofile", cpuP, "hash", hello})
	err := root.ExecuteContext(context.Background())
	if ferr := opts.finishProfile(); err == nil {
		err = ferr
	}
	if err != nil {
		t.Errorf("a CPU profile after the failed start: %v", err)
	}
}
