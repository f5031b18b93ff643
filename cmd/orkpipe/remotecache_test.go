package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"orkpipe/pipelines/engine"
	"orkpipe/registry/regtest"
)

// blobGets records the digests of the blobs a registry serves (GET .../blobs/sha256:...) while on.
type blobGets struct {
	on  atomic.Bool
	mu  sync.Mutex
	got map[string]bool
}

func (b *blobGets) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, d, ok := strings.Cut(r.URL.Path, "/blobs/sha256:"); ok && r.Method == http.MethodGet && b.on.Load() {
			b.mu.Lock()
			b.got["sha256:"+d] = true
			b.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// take returns the digests served since the last take and empties the set.
func (b *blobGets) take() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	got := b.got
	b.got = map[string]bool{}
	return got
}

// objectSHA256s returns the sha256 digests of every object in the cache dir: the digests of the
// remote cache's output layers.
func objectSHA256s(t *testing.T, cache string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(cache, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out["sha256:"+hex.EncodeToString(sum[:])] = true
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// build --plan with a remote cache holding every node of the recipe, on an empty writable cache:
// every node is shown cached in the remote cache, yet no output blob is downloaded (only the
// manifests and records): it downloaded every output of every node (Engine.Status looked them up
// with GetAction), GiBs at 27B. The build then downloads them and runs nothing.
func TestBuildPlanRemoteCacheFetchesNoOutput(t *testing.T) {
	dir := t.TempDir()
	recipe, _, _ := tinyRecipe(t, dir)
	gets := &blobGets{got: map[string]bool{}}
	reg := regtest.Start(t, gets.wrap)
	remote := []string{"--remote-cache", reg.Host + "/orkpipe/cache", "--remote-cache-plain-http"}
	cacheA, cacheB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if _, stderr, code := demoCLI(t, append([]string{"--cache", cacheA, "--mem", "2GiB", "-j", "2", "build", recipe, "-o", filepath.Join(dir, "outA")}, remote...)...); code != 0 {
		t.Fatalf("build publishing to the remote cache: exit %d: %s", code, stderr)
	}
	outputs := objectSHA256s(t, cacheA)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return demoCLI(t, append(append([]string{"--cache", cacheB, "--mem", "2GiB"}, args...), remote...)...)
	}

	gets.on.Store(true)
	stdout, stderr, code := cli("--json", "build", "--plan", recipe, "-o", filepath.Join(dir, "outB"))
	var plan struct {
		Nodes  []engine.NodeStatus `json:"nodes"`
		Writes int64               `json:"writes_bytes"`
	}
	if err := json.Unmarshal([]byte(stdout), &plan); code != 0 || err != nil || len(plan.Nodes) == 0 {
		t.Fatalf("build --plan --json: exit %d, %v:\n%s%s", code, err, stdout, stderr)
	}
	var fetch int64
	for _, n := range plan.Nodes {
		if !n.Cached || !n.Remote || n.RemoteBytes <= 0 {
			t.Errorf("node %s: cached %v remote %v remote_bytes %d, want cached in the remote cache", n.ID, n.Cached, n.Remote, n.RemoteBytes)
		}
		fetch += n.RemoteBytes
	}
	if plan.Writes != fetch {
		t.Errorf("writes_bytes %d, want the remote nodes' outputs the build downloads, %d", plan.Writes, fetch)
	}
	stdout, stderr, code = cli("build", "--plan", recipe, "-o", filepath.Join(dir, "outB"))
	all := fmt.Sprintf("clitiny: %d nodes, %d cached (%d in the remote cache)", len(plan.Nodes), len(plan.Nodes), len(plan.Nodes))
	if code != 0 || !strings.Contains(stdout, all) || !strings.Contains(stdout, fmt.Sprintf("the downloads of the %d nodes in the remote cache", len(plan.Nodes))) {
		t.Errorf("build --plan: exit %d, want %q and the downloads in the space line:\n%s%s", code, all, stdout, stderr)
	}
	planned := gets.take()
	for d := range planned {
		if outputs[d] {
			t.Errorf("build --plan downloaded output blob %s", d)
		}
	}
	if len(planned) == 0 {
		t.Error("build --plan fetched no blob: the records are blobs too")
	}
	if got := objectSHA256s(t, cacheB); len(got) != 0 {
		t.Errorf("build --plan stored %d objects in the cache, want none", len(got))
	}

	// The build downloads the outputs and runs nothing.
	stdout, stderr, code = cli("--json", "-j", "2", "build", recipe, "-o", filepath.Join(dir, "outB"))
	if _, sum := demoEvents(t, stdout); code != 0 || sum["executed"].(float64) != 0 {
		t.Fatalf("build from the remote cache: exit %d, summary %v:\n%s", code, sum, stderr)
	}
	built := gets.take()
	n := 0
	for d := range built {
		if outputs[d] {
			n++
		}
	}
	if n == 0 {
		t.Errorf("the build downloaded none of the %d output blobs (%d blobs)", len(outputs), len(built))
	}
}
