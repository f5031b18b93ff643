package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// roCache is what TestReadOnlyCache built before making the cache read-only, for the checks (in a
// child process when they need a mount: TestHelperReadOnlyCache).
type roCache struct {
	Cache  string `json:"cache"`
	Recipe string `json:"recipe"`
	Out    string `json:"out"`    // where the build's outputs are
	Nodes  int    `json:"nodes"`  // how many nodes the plan has, all cached
	Corpus string `json:"corpus"` // a user file to hash
	// Remote is a remote cache (REGISTRY/REPO, plain HTTP) holding the recipe built with
	// source.synth.seed=10, which the cache lacks.
	Remote string `json:"remote"`
}

// The commands that only read the cache work on a cache this process cannot write — a read-only
// bind mount (root), a tree without write permission (other users) — and change nothing in it:
// plan and build --plan see every node of the built recipe cached, explain, cache du, cache verify
// and hash answer as on a writable cache; build --plan with --remote-cache warns once that the remote
// cache is not consulted (nothing it holds could be stored), and verify REF without -o asks for -o
// before pulling; a malformed --remote-cache is refused as on a writable cache; plan measures this
// host's speeds, which the cache lacks, and says at -v that it cannot keep them, without a warning.
// They all failed (the store opened store.lock for writing and started a temp session). A command
// that writes (build, cache gc) fails saying the cache is not writable and naming it.
func TestReadOnlyCache(t *testing.T) {
	dir := t.TempDir()
	recipe, corpus, _ := tinyRecipe(t, dir)
	rc := roCache{Cache: filepath.Join(dir, "cache"), Recipe: recipe, Out: filepath.Join(dir, "out"), Corpus: corpus}
	if _, stderr, code := demoCLI(t, "--cache", rc.Cache, "--mem", "2GiB", "-j", "2", "build", recipe, "-o", rc.Out); code != 0 {
		t.Fatalf("build: exit %d: %s", code, stderr)
	}
	out, stderr, code := demoCLI(t, "--cache", rc.Cache, "--mem", "2GiB", "plan", recipe)
	m := regexp.MustCompile(`clitiny: (\d+) nodes, (\d+) cached`).FindStringSubmatch(out)
	if code != 0 || m == nil || m[1] != m[2] {
		t.Fatalf("plan after the build: exit %d, %s%s", code, out, stderr)
	}
	fmt.Sscan(m[1], &rc.Nodes)
	reg := regtest.Start(t, nil)
	rc.Remote = reg.Host + "/orkpipe/cache"
	if _, stderr, code := demoCLI(t, "--cache", filepath.Join(dir, "other"), "--mem", "2GiB", "-j", "2", "build", recipe, "-o", filepath.Join(dir, "out10"),
		"--set", "source.synth.seed=10", "--remote-cache", rc.Remote, "--remote-cache-plain-http"); code != 0 {
		t.Fatalf("build publishing to the remote cache: exit %d: %s", code, stderr)
	}
	for _, bad := range malformedRemotes { // on the writable cache, which opens the remote
		_, stderr, code := demoCLI(t, "--cache", rc.Cache, "--mem", "2GiB", "build", "--plan", recipe, "-o", rc.Out, "--remote-cache", bad)
		if code != 2 || !strings.Contains(stderr, "--remote-cache: want REGISTRY/REPO") {
			t.Errorf("build --plan --remote-cache %s: exit %d, want the usage error of a malformed name:\n%s", bad, code, stderr)
		}
	}
	before := testfiles.Tree(t, rc.Cache)
	if os.Geteuid() != 0 {
		testfiles.DenyWrites(t, rc.Cache)
		before = testfiles.Tree(t, rc.Cache)
		checkReadOnlyCache(t, rc)
	} else {
		// Root writes through any permission: a read-only bind mount of the cache, in a child's
		// mount namespace of its own (testfiles.InReadOnlyMount).
		testfiles.InReadOnlyMount(t, "TestHelperReadOnlyCache", rc.Cache, rc)
	}
	testfiles.SameTree(t, before, testfiles.Tree(t, rc.Cache))
}

// malformedRemotes are --remote-cache values that name no repository: no registry, an upper-case
// repository name.
var malformedRemotes = []string{"localhost:5000orkpipe", "localhost:5000/OrkPipe/cache"}

// checkReadOnlyCache runs the commands on rc's cache, which this process cannot write.
func checkReadOnlyCache(t *testing.T, rc roCache) {
	t.Helper()
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return demoCLI(t, append([]string{"--cache", rc.Cache, "--mem", "2GiB"}, args...)...)
	}
	cached := fmt.Sprintf("clitiny: %d nodes, %d cached", rc.Nodes, rc.Nodes)
	out, stderr, code := cli("-v", "plan", rc.Recipe)
	if code != 0 || !strings.Contains(out, cached) || !strings.Contains(stderr, "opened read-only") {
		t.Errorf("plan: exit %d, want %q and the read-only open logged (-v):\n%s%s", code, cached, out, stderr)
	}
	if out, stderr, code := cli("build", "--plan", rc.Recipe, "-o", rc.Out); code != 0 || !strings.Contains(out, cached) {
		t.Errorf("build --plan: exit %d, want %q:\n%s%s", code, cached, out, stderr)
	}
	// build --plan with a remote cache that holds what the cache lacks: a remote hit could not be
	// stored, so the remote is not asked, and one warning says so (it was asked: every node it
	// held warned that its record was unusable, the cache being read-only).
	out, stderr, code = cli("build", "--plan", rc.Recipe, "-o", rc.Out, "--set", "source.synth.seed=10", "--remote-cache", rc.Remote, "--remote-cache-plain-http")
	if code != 0 || strings.Count(stderr, "--remote-cache not consulted") != 1 || !strings.Contains(stderr, rc.Cache) || strings.Contains(stderr, "unusable") {
		t.Errorf("build --plan --remote-cache: exit %d, want one warning that the remote cache is not consulted, naming the cache, and no unusable record:\n%s%s", code, out, stderr)
	}
	// A malformed --remote-cache is the usage error it is on a writable cache, though the remote is
	// not opened here (it was not checked: the warning named the typo).
	for _, bad := range malformedRemotes {
		_, stderr, code := cli("build", "--plan", rc.Recipe, "-o", rc.Out, "--remote-cache", bad)
		if code != 2 || !strings.Contains(stderr, "--remote-cache: want REGISTRY/REPO") || strings.Contains(stderr, "not consulted") {
			t.Errorf("build --plan --remote-cache %s on a read-only cache: exit %d, want the usage error of a malformed name:\n%s", bad, code, stderr)
		}
	}
	// This host's speeds (the build planned at the reference host's, so the cache keeps none for
	// it): measured, and said at -v, without a warning that they cannot be kept (one on every plan).
	t.Setenv(hostSpeedsEnv, "")
	out, stderr, code = cli("-v", "plan", rc.Recipe, "--set", "source.synth.seed=10")
	if code != 0 || !strings.Contains(stderr, "measured this host's kernel speeds for the estimates; not kept, the cache being read-only") ||
		strings.Contains(stderr, "level=WARN") {
		t.Errorf("plan measuring this host's speeds on a read-only cache: exit %d, want the measurement said at -v, and no warning:\n%s%s", code, out, stderr)
	}
	t.Setenv(hostSpeedsEnv, "reference")
	// verify REF without -o pulls into <cache>/verify/: it fails before pulling, naming the cache
	// and asking for -o (it failed creating the directory, saying only that).
	ref := strings.Replace(rc.Remote, "/cache", "/pack:v1", 1)
	if _, stderr, code := cli("verify", ref, "--plain-http"); code == 0 || !strings.Contains(stderr, filepath.Join(rc.Cache, "verify")) ||
		!strings.Contains(stderr, "not writable") || !strings.Contains(stderr, "pass -o DIR") {
		t.Errorf("verify REF on a read-only cache: exit %d, want an error naming the cache, saying it is not writable and asking for -o:\n%s", code, stderr)
	}
	if out, stderr, code := cli("explain", rc.Recipe); code != 0 || !strings.Contains(out, "clitiny: last build") {
		t.Errorf("explain: exit %d:\n%s%s", code, out, stderr)
	}
	if out, stderr, code := cli("cache", "du"); code != 0 || !strings.Contains(out, rc.Cache+": ") {
		t.Errorf("cache du: exit %d:\n%s%s", code, out, stderr)
	}
	if out, stderr, code := cli("cache", "verify"); code != 0 || !strings.Contains(out, " 0 corrupt") {
		t.Errorf("cache verify: exit %d:\n%s%s", code, out, stderr)
	}
	if out, stderr, code := cli("hash", rc.Corpus); code != 0 || !regexp.MustCompile(`^[0-9a-f]{64}  `+regexp.QuoteMeta(rc.Corpus)+"\n$").MatchString(out) {
		t.Errorf("hash: exit %d:\n%s%s", code, out, stderr)
	}
	// Commands that write say why they cannot.
	for _, args := range [][]string{
		{"build", rc.Recipe, "-o", filepath.Join(t.TempDir(), "out")},
		{"cache", "gc", "--max-size", "1GiB"},
	} {
		_, stderr, code := cli(args...)
		if code == 0 || !strings.Contains(stderr, rc.Cache) || !strings.Contains(stderr, "not writable") {
			t.Errorf("%s on a read-only cache: exit %d, want an error naming the cache and saying it is not writable:\n%s", args[0], code, stderr)
		}
	}
}

// TestHelperReadOnlyCache is not a test: TestReadOnlyCache runs it in a child process whose mount
// namespace has the cache bind-mounted read-only over itself (testfiles.InReadOnlyMount).
func TestHelperReadOnlyCache(t *testing.T) {
	var rc roCache
	if testfiles.ReadOnlyMountChild(t, "TestReadOnlyCache", &rc) {
		checkReadOnlyCache(t, rc)
	}
}
