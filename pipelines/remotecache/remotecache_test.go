package remotecache_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
func build(t *testing.T, reg *regtest.Registry, repo, dir string) (*engine.Result, []byte) {
	t.Helper()
	ctx := context.Background()
	local, err := artifacts.OpenStore(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	rc, err := cacherepo.Open(ctx, reg.Host+"/"+repo, oci.WithPlainHTTP(reg.Host))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(remotecache.New(local, rc, repo), engine.WithJobs(2), engine.WithMemoryBudget(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	target := demo.Target{Seed: 3, Size: 200_000}
	g, err := target.Graph(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	res, err := e.Build(ctx, target.Name(), p, engine.BuildOptions{OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "demo.bin"))
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
