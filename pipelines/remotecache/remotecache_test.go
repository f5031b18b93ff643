package remotecache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/demo"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/remotecache"
	"orkpipe/registry/cacherepo"
	"orkpipe/registry/oci"
	"orkpipe/registry/regtest"
)

// build runs the demo target on a fresh local store in dir, backed by the remote cache in repo.
func build(t *testing.T, reg *regtest.Registry, repo, dir string, opts ...oci.Option) (*engine.Result, []byte) {
	t.Helper()
	m := newMachine(t, reg, repo, dir, opts...)
	defer m.local.Close()
	return m.build(t)
}

// machine is an engine on a fresh local store in dir, backed by the remote cache in repo, with the
// demo target planned.
type machine struct {
	e     *engine.Engine
	p     *engine.Plan
	local *artifacts.Store
	out   string
}

func newMachine(t *testing.T, reg *regtest.Registry, repo, dir string, opts ...oci.Option) *machine {
	t.Helper()
	ctx := context.Background()
	local, err := artifacts.OpenStore(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cacherepo.Open(ctx, reg.Host+"/"+repo, append([]oci.Option{oci.WithPlainHTTP(reg.Host)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(remotecache.New(local, rc, repo), engine.WithJobs(2), engine.WithMemoryBudget(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	g, err := demo.Target{Seed: 3, Size: 200_000}.Graph(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	return &machine{e: e, p: p, local: local, out: filepath.Join(dir, "out")}
}

// build builds the demo target and returns demo.bin.
func (m *machine) build(t *testing.T) (*engine.Result, []byte) {
	t.Helper()
	res, err := m.e.Build(context.Background(), "demo", m.p, engine.BuildOptions{OutDir: m.out})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(m.out, "demo.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// TestRemoteCacheBuild: build on machine A with the remote cache, then on machine B (an empty local
// cache): B executes nothing and its outputs are byte-identical.
func TestRemoteCacheBuild(t *testing.T) {
	reg := regtest.Start(t, nil)
	a, outA := build(t, reg, "orkpipe/cache", t.TempDir())
	if a.Executed != 5 || a.Cached != 0 {
		t.Fatalf("machine A: executed %d cached %d, want 5 and 0", a.Executed, a.Cached)
	}
	b, outB := build(t, reg, "orkpipe/cache", t.TempDir())
	if b.Executed != 0 || b.Cached != 5 {
		t.Fatalf("machine B with the remote cache: executed %d cached %d, want 0 and 5", b.Executed, b.Cached)
	}
	if !bytes.Equal(outA, outB) {
		t.Fatal("outputs differ between the machine that built and the one that reused the remote cache")
	}
	// Another repository is another cache: everything runs again.
	c, _ := build(t, reg, "orkpipe/other", t.TempDir())
	if c.Executed != 5 {
		t.Fatalf("fresh repository: executed %d, want 5", c.Executed)
	}
}

// TestRemoteCacheCorruptDownload: a registry that serves corrupted blobs is detected for every node
// (sha256 of what arrived); the engine treats each such record as unusable (a warning naming the node
// and the digests) and runs the node itself, as it does for a corrupt local object. Nothing corrupt
// enters the local store and the outputs are right.
func TestRemoteCacheCorruptDownload(t *testing.T) {
	var corrupt atomic.Bool
	reg := regtest.Start(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if corrupt.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				h.ServeHTTP(&flipWriter{ResponseWriter: w}, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	_, want := build(t, reg, "orkpipe/cache", t.TempDir())
	corrupt.Store(true)

	ctx := context.Background()
	dir := t.TempDir()
	local, err := artifacts.OpenStore(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	rc, err := cacherepo.Open(ctx, reg.Host+"/orkpipe/cache", oci.WithPlainHTTP(reg.Host), oci.WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	e, err := engine.New(remotecache.New(local, rc, "orkpipe/cache"), engine.WithJobs(1), engine.WithMemoryBudget(1<<30),
		engine.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := demo.Target{Seed: 3, Size: 200_000}.Graph(ctx)
	p, err := e.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Build(ctx, "demo", p, engine.BuildOptions{OutDir: filepath.Join(dir, "out")})
	if err != nil {
		t.Fatalf("build through a corrupting registry: %v", err)
	}
	if res.Executed != 5 {
		t.Errorf("executed %d nodes, want all 5 (no corrupt remote result may be used)", res.Executed)
	}
	if n := strings.Count(logs.String(), "digest mismatch"); n < 5 {
		t.Errorf("%d digest-mismatch warnings, want one per node at least:\n%s", n, logs.String())
	}
	got, err := os.ReadFile(filepath.Join(dir, "out", "demo.bin"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("demo.bin after a corrupt remote differs from the clean build (%v)", err)
	}
	rep, err := local.VerifyAll(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("local store after a corrupt remote: %+v, %v", rep, err)
	}
}

// flipWriter flips one bit of the first body byte it forwards.
type flipWriter struct {
	http.ResponseWriter
	done bool
}

func (f *flipWriter) Write(p []byte) (int, error) {
	if !f.done && len(p) > 0 {
		q := append([]byte(nil), p...)
		q[0] ^= 1
		f.done = true
		return f.ResponseWriter.Write(q)
	}
	return f.ResponseWriter.Write(p)
}

// corruptBlob flips one byte of the blob holding data in the registry's filesystem storage: the
// registry then serves the wrong bytes under data's sha256 to every client, and keeps serving them.
// It returns the blob's digest.
func corruptBlob(t *testing.T, reg *regtest.Registry, data []byte) string {
	t.Helper()
	sum := sha256.Sum256(data)
	hx := hex.EncodeToString(sum[:])
	path := filepath.Join(reg.RootDir, "docker", "registry", "v2", "blobs", "sha256", hx[:2], hx, "data")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the registry's blob of %d bytes: %v", len(data), err)
	}
	if !bytes.Equal(b, data) {
		t.Fatalf("%s does not hold the blob", path)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hx
}

// TestRemoteCacheRepairsCorruptBlob: a blob corrupted in the registry's storage (the join node's
// output) costs one build one run of that node, and no more: that build publishes the node's
// result again in a layer the registry does not hold corrupt, so the next machine (an empty local
// store) is served every node from the remote cache. Re-uploading the object's own blob would not
// do: the registry accepts the upload and keeps the corrupt bytes it has under that digest.
func TestRemoteCacheRepairsCorruptBlob(t *testing.T) {
	reg := regtest.Start(t, nil)
	a, want := build(t, reg, "orkpipe/cache", t.TempDir())
	if a.Executed != 5 {
		t.Fatalf("machine A: executed %d, want 5", a.Executed)
	}
	corruptBlob(t, reg, want)

	b, got := build(t, reg, "orkpipe/cache", t.TempDir(), oci.WithRetries(2))
	if b.Executed != 1 || b.Executions != 1 || b.Cached != 4 {
		t.Errorf("machine B (corrupt join output in the remote): executed %d (%d runs), cached %d; want the join node run once, 4 cached",
			b.Executed, b.Executions, b.Cached)
	}
	for _, n := range b.Nodes {
		if (n.Outcome == engine.OutcomeExecuted) != (n.ID == "join") {
			t.Errorf("machine B: node %s %s", n.ID, n.Outcome)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("machine B: demo.bin differs from machine A's")
	}

	c, got := build(t, reg, "orkpipe/cache", t.TempDir(), oci.WithRetries(2))
	if c.Executed != 0 || c.Cached != 5 {
		t.Errorf("machine C after the repair: executed %d cached %d, want 0 and 5 (the remote cache still serves the corrupt blob)", c.Executed, c.Cached)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("machine C: demo.bin differs from machine A's")
	}
}

// TestRemoteCacheOneLookupPerNode: a build that plans (Engine.Status, as `orkpipe build` does for
// its space check and --plan) and then builds asks the registry for each node's record once, and
// downloads each blob once — also a record that misses, and a blob that arrives corrupt (once per
// attempt of that one lookup, not once per attempt of each of the engine's three looks).
func TestRemoteCacheOneLookupPerNode(t *testing.T) {
	var mu sync.Mutex
	gets := map[string]int{} // "manifest action-<key>" or "blob sha256:<hex>" -> GETs
	reg := regtest.Start(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				if _, tag, ok := strings.Cut(r.URL.Path, "/manifests/"); ok {
					mu.Lock()
					gets["manifest "+tag]++
					mu.Unlock()
				} else if _, d, ok := strings.Cut(r.URL.Path, "/blobs/"); ok {
					mu.Lock()
					gets["blob "+d]++
					mu.Unlock()
				}
			}
			h.ServeHTTP(w, r)
		})
	})
	const retries = 2
	statusAndBuild := func() (*engine.Result, []byte, map[string]int) {
		t.Helper()
		mu.Lock()
		clear(gets)
		mu.Unlock()
		m := newMachine(t, reg, "orkpipe/cache", t.TempDir(), oci.WithRetries(retries))
		defer m.local.Close()
		if _, err := m.e.Status(context.Background(), m.p); err != nil {
			t.Fatal(err)
		}
		res, out := m.build(t)
		mu.Lock()
		defer mu.Unlock()
		return res, out, maps.Clone(gets)
	}

	// Machine A: the repository is empty, every lookup a miss.
	a, want, got := statusAndBuild()
	if a.Executed != 5 {
		t.Fatalf("machine A: executed %d, want 5", a.Executed)
	}
	for _, n := range a.Nodes {
		if k := "manifest action-" + n.Key.Hex(); got[k] != 1 {
			t.Errorf("machine A, node %s: %d GETs of its record's manifest, want 1", n.ID, got[k])
		}
	}

	// Machine B: every record is there, the join node's output blob corrupt.
	bad := corruptBlob(t, reg, want)
	b, _, got := statusAndBuild()
	if b.Executed != 1 || b.Cached != 4 {
		t.Fatalf("machine B: executed %d cached %d, want 1 and 4", b.Executed, b.Cached)
	}
	for _, n := range b.Nodes {
		if k := "manifest action-" + n.Key.Hex(); got[k] != 1 {
			t.Errorf("machine B, node %s: %d GETs of its record's manifest, want 1", n.ID, got[k])
		}
	}
	blobs := 0
	for k, n := range got {
		d, ok := strings.CutPrefix(k, "blob ")
		if !ok {
			continue
		}
		blobs++
		switch {
		case d == bad && n != retries:
			t.Errorf("machine B: the corrupt blob %s was downloaded %d times, want %d (the attempts of one lookup)", d, n, retries)
		case d != bad && n != 1:
			t.Errorf("machine B: blob %s downloaded %d times, want once", d, n)
		}
	}
	if blobs < 5 {
		t.Errorf("machine B downloaded %d distinct blobs, want a record and an output at least for each of 4 cached nodes and the corrupt one:\n%v", blobs, got)
	}
}

// TestRemoteCacheServesDamagedLocalRecord: a local action record damaged on disk (the join node's,
// cut short) is quarantined by its first lookup, which fails with artifacts.ErrInvalidRecord; that
// lookup is a miss for the remote cache, which holds the key: the plan that meets it shows the node
// cached (served from the remote), the build executes nothing, and the record is local and valid
// again; the warnings say the record was quarantined, not that the node runs (the store's said so).
// The remote cache was asked only on ErrNotFound, so that lookup was a miss: the plan showed
// the node to run (a build's second look, after the quarantine, did reach the remote).
func TestRemoteCacheServesDamagedLocalRecord(t *testing.T) {
	reg := regtest.Start(t, nil)
	dir := t.TempDir()
	a, want := build(t, reg, "orkpipe/cache", dir)
	if a.Executed != 5 {
		t.Fatalf("first build: executed %d, want 5", a.Executed)
	}
	var key artifacts.Digest
	for _, n := range a.Nodes {
		if n.ID == "join" {
			key = n.Key
		}
	}
	if key.IsZero() {
		t.Fatalf("no join node in %+v", a.Nodes)
	}
	p := filepath.Join(dir, "cache", "actions", key.Hex()[:2], key.Hex()+".json")
	good, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("the join node's local record: %v", err)
	}
	if err := os.WriteFile(p, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}

	// The plan (one lookup per node, as `orkpipe build --plan` and build's space check make) is
	// the look that meets the damaged record: the build's own looks come after it was quarantined.
	// What the store and the engine log (both to the default logger) must be true: the node is
	// quarantined and served from the remote cache, so nothing may say it runs.
	var logs bytes.Buffer
	defer func(l *slog.Logger) { slog.SetDefault(l) }(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	m := newMachine(t, reg, "orkpipe/cache", dir)
	defer m.local.Close()
	st, err := m.e.Status(context.Background(), m.p)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st {
		if !n.Cached {
			t.Errorf("plan with the join node's local record damaged: node %s not cached, want every node served from the remote cache", n.ID)
		}
	}
	b, got := m.build(t)
	if b.Executed != 0 || b.Cached != 5 {
		t.Errorf("build with the join node's local record damaged: executed %d cached %d, want 0 and 5 (served from the remote cache)", b.Executed, b.Cached)
	}
	for _, n := range b.Nodes {
		if n.Outcome != engine.OutcomeCached {
			t.Errorf("node %s %s, want cached", n.ID, n.Outcome)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("demo.bin differs from the first build's")
	}
	if q, _ := filepath.Glob(filepath.Join(dir, "cache", "quarantine", "action-"+key.Hex()+".*.json")); len(q) != 1 {
		t.Errorf("quarantine holds %v, want the damaged record", q)
	}
	if l := logs.String(); !strings.Contains(l, "invalid action record quarantined") || (strings.Contains(l, "runs again") || strings.Contains(l, "will run")) {
		t.Errorf("logs of a damaged record the remote cache served: want its quarantine, and nothing saying the node runs:\n%s", l)
	}
	if _, err := m.local.GetAction(context.Background(), key); err != nil {
		t.Errorf("the join node's local record after the remote hit: %v", err)
	}
}
