package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildChecksSpace: plan says what the nodes not cached write into the cache (the sum of their
// declarations) and how much room there is; a build that would not fit is refused before any node
// runs, naming the figures and the way out, and runs with --no-space-check; once built, nothing is
// left to write. The full disk is a test double (cacheFreeBytes): this machine's disks are not full.
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
	defer func(f func(string) (int64, error)) { cacheFreeBytes = f }(cacheFreeBytes)
	cacheFreeBytes = func(string) (int64, error) { return free, nil }
	if _, text := plan(); !strings.Contains(text, "the build would stop for lack of space") {
		t.Errorf("plan on a full disk: no warning:\n%s", text)
	}
	_, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", out)
	if code != 1 || !strings.Contains(stderr, "nodes not cached write about") || !strings.Contains(stderr, cache) || !strings.Contains(stderr, "--no-space-check") {
		t.Fatalf("build on a full disk: exit %d, stderr %q; want exit 1 naming the cache and --no-space-check", code, stderr)
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
}

// TestFreeBytes: a cache directory not made yet is measured at its nearest existing parent; a path
// that cannot be one (under a file) is an error naming it.
func TestFreeBytes(t *testing.T) {
	dir := t.TempDir()
	have, err := freeBytes(dir)
	if err != nil || have <= 0 {
		t.Fatalf("freeBytes(%s) = %d, %v", dir, have, err)
	}
	if got, err := freeBytes(filepath.Join(dir, "a", "b", "cache")); err != nil || got <= 0 {
		t.Errorf("freeBytes of a directory not made yet = %d, %v; want its parent's", got, err)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := freeBytes(filepath.Join(file, "cache")); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("freeBytes under a file: %v, want an error naming it", err)
	}
}
