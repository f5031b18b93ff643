package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"orkpipe/internal/testfiles"
)

// A page's temp file, in the user's directory of -o FILE, is locked while written: one that a killed
// orkpipe left there (its lock gone with the process) is removed by the next page written into that
// directory, a live writer's is not; with or without --force the page arrives whole. It stayed,
// under a random name.
func TestWritePageSweepsDeadTemps(t *testing.T) {
	for _, force := range []bool{false, true} {
		dir := t.TempDir()
		dead := filepath.Join(dir, ".orkpipe-0123456789abcdef.tmp")
		live := filepath.Join(dir, ".orkpipe-fedcba9876543210.tmp")
		testfiles.DeadAndLiveTemps(t, dead, live, []byte("<html>half a page"))
		var buf bytes.Buffer
		out := filepath.Join(dir, "report.html")
		page := []byte("<html>the page</html>\n")
		if err := writePage(newGlobalOptions(&buf, &buf), &pageFlags{out: out, force: force}, page); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(out); err != nil || !bytes.Equal(b, page) {
			t.Fatalf("force %v: %s holds %q (%v)", force, out, b, err)
		}
		if names, want := testfiles.DirNames(t, dir), []string{filepath.Base(live), "report.html"}; !slices.Equal(names, want) {
			t.Fatalf("force %v: %s holds %v, want %v (the dead writer's temp file removed, the live one's kept)", force, dir, names, want)
		}
	}
}
