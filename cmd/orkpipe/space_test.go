package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/units"
)

// TestBuildChecksSpace: plan says what the nodes not cached write into the cache (the sum of their
// declarations) and how much room there is; a build that would not fit is refused before any node
// runs, naming the figures and the way out, and runs with --no-space-check; once built, nothing is
// left to write. The full disk is a test double (fsSpace): this machine's disks are not full.
func TestBuildChecksSpace(t *testing.T) {
	dir := t.TempDir()
	recipe, _, _ := tinyRecipe(t, dir)
	cache, out := filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	plan := func() (planOutput, string) {
		t.Helper()
		stdout, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "--json", "plan", recipe)
		if code != 0 {
			t.Fatalf("plan: exit %d: %s", code, stderr)
		}
		var p planOutput
		if err := json.Unmarshal([]byte(stdout), &p); err != nil {
			t.Fatal(err)
		}
		text, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "plan", recipe)
		if code != 0 {
			t.Fatalf("plan: exit %d: %s", code, stderr)
		}
		return p, text
	}
	p, text := plan()
	var sum int64
	for _, n := range p.Nodes {
		if !n.Cached {
			sum += n.Writes
		}
	}
	if p.WritesBytes <= 0 || p.WritesBytes != sum {
		t.Fatalf("plan --json: writes_bytes %d, want the nodes' writes summed, %d (> 0)", p.WritesBytes, sum)
	}
	if p.CacheFreeBytes == nil || *p.CacheFreeBytes <= 0 {
		t.Fatalf("plan --json: cache_free_bytes %v, want the cache filesystem's free space", p.CacheFreeBytes)
	}
	if !strings.Contains(text, "cache: the nodes not cached write about ") || !strings.Contains(text, " free in "+cache+")") {
		t.Errorf("plan: no space line naming the cache:\n%s", text)
	}

	free := p.WritesBytes - 1
	defer func(f func(string) (fsInfo, error)) { fsSpace = f }(fsSpace)
	fsSpace = func(string) (fsInfo, error) { return fsInfo{free: free}, nil }
	if _, text := plan(); !strings.Contains(text, "the build would stop for lack of space") {
		t.Errorf("plan on a full disk: no warning:\n%s", text)
	}
	_, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", out)
	if code != 1 || !strings.Contains(stderr, "nodes not cached write about") || !strings.Contains(stderr, cache) || !strings.Contains(stderr, "--no-space-check") ||
		!strings.Contains(stderr, "the cache holds nothing gc can free") {
		t.Fatalf("build on a full disk: exit %d, stderr %q; want exit 1 naming the cache, --no-space-check and that gc frees nothing", code, stderr)
	}
	if p, _ := plan(); p.WritesBytes != sum {
		t.Errorf("after the refused build: writes_bytes %d, want %d (nothing run)", p.WritesBytes, sum)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused build made its output directory: %v", err)
	}
	if _, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", out, "--no-space-check"); code != 0 {
		t.Fatalf("build --no-space-check: exit %d: %s", code, stderr)
	}
	p, text = plan()
	if p.WritesBytes != 0 || strings.Contains(text, "cache:") {
		t.Errorf("plan after the build: writes_bytes %d, text\n%s\nwant nothing to write and no space line", p.WritesBytes, text)
	}
	// Another seed on the full disk: the refusal says what gc could free, cache du's figure.
	duOut, _, _ := demoCLI(t, "--cache", cache, "--json", "cache", "du")
	var du artifacts.UsageReport
	if err := json.Unmarshal([]byte(duOut), &du); err != nil || du.Disk <= du.PinnedDisk {
		t.Fatalf("cache du: %v, %+v; want unpinned objects", err, du)
	}
	_, stderr, code = demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", out, "--set", "source.synth.seed=2")
	if want := "cache gc --max-size SIZE up to " + units.FormatSize(du.Disk-du.PinnedDisk) + " that no target's latest build pins"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("build of another seed on a full disk: exit %d, stderr %q; want exit 1 saying %q", code, stderr, want)
	}
}

// TestStatFS: a cache directory not made yet is measured at its nearest existing parent (its free
// space and device); a path that cannot be one (under a file) is an error naming it.
func TestStatFS(t *testing.T) {
	dir := t.TempDir()
	have, err := statFS(dir)
	if err != nil || have.free <= 0 {
		t.Fatalf("statFS(%s) = %+v, %v", dir, have, err)
	}
	if got, err := statFS(filepath.Join(dir, "a", "b", "cache")); err != nil || got.free <= 0 || got.dev != have.dev {
		t.Errorf("statFS of a directory not made yet = %+v, %v; want its parent's (%+v)", got, err, have)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := statFS(filepath.Join(file, "cache")); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("statFS under a file: %v, want an error naming it", err)
	}
}

// TestBuildChecksOutputSpace: with -o on another filesystem than the cache (the results are copies
// there, not hard links), build --plan says what copying them writes and how much room there is, a
// build whose results would not fit is refused before any node runs, and results already in place
// are not counted again. The other filesystem and its free space are a test double (fsSpace); the
// copies themselves are artifacts' TestMaterializeCopyInPlace.
func TestBuildChecksOutputSpace(t *testing.T) {
	dir := t.TempDir()
	recipe, _, _ := tinyRecipe(t, dir)
	cache, out := filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	outFree := int64(1 << 40)
	defer func(f func(string) (fsInfo, error)) { fsSpace = f }(fsSpace)
	fsSpace = func(d string) (fsInfo, error) {
		if d == out {
			return fsInfo{free: outFree, dev: 2}, nil
		}
		return fsInfo{free: 1 << 50, dev: 1}, nil
	}
	plan := func() (planOutput, string) {
		t.Helper()
		stdout, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "--json", "build", "--plan", recipe, "-o", out)
		if code != 0 {
			t.Fatalf("build --plan: exit %d: %s", code, stderr)
		}
		var p planOutput
		if err := json.Unmarshal([]byte(stdout), &p); err != nil {
			t.Fatal(err)
		}
		text, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", "--plan", recipe, "-o", out)
		if code != 0 {
			t.Fatalf("build --plan: exit %d: %s", code, stderr)
		}
		return p, text
	}
	p, text := plan()
	var sum int64
	exports := 0
	for _, n := range p.Nodes {
		if len(n.Exports) > 0 {
			exports += len(n.Exports)
			sum += n.Writes
		}
	}
	if exports < 2 || p.OutputDir != out || p.OutputWritesBytes != sum || sum <= 0 || p.OutputFreeBytes == nil || *p.OutputFreeBytes != outFree {
		t.Fatalf("build --plan --json: %d exports, output_dir %q, output_writes_bytes %d, output_free_bytes %v; want %q, the exporting nodes' writes %d, %d",
			exports, p.OutputDir, p.OutputWritesBytes, p.OutputFreeBytes, out, sum, outFree)
	}
	if !strings.Contains(text, "output: copying the results into "+out+" (another filesystem than the cache's) writes about ") {
		t.Errorf("build --plan: no output line:\n%s", text)
	}

	outFree = sum - 1
	_, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", out)
	if code != 1 || !strings.Contains(stderr, "copying the results into "+out) || !strings.Contains(stderr, "choose -o") || strings.Contains(stderr, "into the cache") {
		t.Fatalf("build with a full output disk: exit %d, stderr %q; want exit 1 naming the directory, -o and not the cache", code, stderr)
	}
	if p, _ := plan(); p.WritesBytes == 0 {
		t.Fatal("the refused build ran nodes")
	}

	outFree = 1 << 40
	if _, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", out); code != 0 {
		t.Fatalf("build: exit %d: %s", code, stderr)
	}
	// The results are in place (here hard links: one real filesystem): nothing to copy.
	p, text = plan()
	if p.OutputDir != out || p.OutputWritesBytes != 0 || strings.Contains(text, "output:") {
		t.Fatalf("after the build: output_dir %q, output_writes_bytes %d, text\n%s\nwant %s with nothing to copy", p.OutputDir, p.OutputWritesBytes, text, out)
	}
	// One result removed: its object's blocks are to copy again.
	var pack planExport
	for _, n := range p.Nodes {
		for name, output := range n.Exports {
			if strings.HasSuffix(name, ".orkpack") {
				pack = planExport{name, output, n.Writes}
			}
		}
	}
	if pack.name == "" {
		t.Fatal("no .orkpack export in the plan")
	}
	st, err := os.Stat(filepath.Join(out, pack.name))
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(out, pack.name))
	if p, _ = plan(); p.OutputWritesBytes < st.Size() || p.OutputWritesBytes > st.Size()+64<<10 {
		t.Errorf("with %s removed: output_writes_bytes %d, want its %d bytes (allocated)", pack.name, p.OutputWritesBytes, st.Size())
	}
	// A build served from its memo (nothing planned) checks too, and materializes nothing when the
	// copy does not fit.
	outFree = st.Size() - 1
	_, stderr, code = demoCLI(t, "--cache", cache, "--mem", "2GiB", "-v", "build", recipe, "-o", out)
	if code != 1 || !strings.Contains(stderr, "copying the results into "+out) || !strings.Contains(stderr, "served from its memo") {
		t.Fatalf("build from the memo with a full output disk: exit %d, stderr %q; want exit 1 naming the directory", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, pack.name)); err == nil {
		t.Fatalf("the refused build materialized %s", pack.name)
	}
	outFree = 1 << 40
	if _, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", out); code != 0 {
		t.Fatalf("build: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, pack.name)); err != nil {
		t.Fatal(err)
	}
}

type planExport struct {
	name, output string
	writes       int64
}
