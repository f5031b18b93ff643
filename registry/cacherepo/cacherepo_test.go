package cacherepo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/registry/oci"
	"orkpipe/registry/regtest"
)

var testCreated = time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)

// TestRemoteCache publishes a node's outputs from one store and gets them into an empty one; a
// registry that corrupts every object makes the get fail without storing anything; publishing
// again reads no object (the repository has them) and hashes none (their sha256 is remembered).
func TestRemoteCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	storeA, err := artifacts.OpenStore(filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer storeA.Close()
	gguf, err := storeA.IngestFile(ctx, testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := storeA.Ingest(ctx, bytes.NewReader([]byte(`{"ppl":2.4871}`)))
	if err != nil {
		t.Fatal(err)
	}
	key := artifacts.SumBytes([]byte("node key material"))
	rec := artifacts.ActionRecord{Key: key, Stage: "emit-stub", Version: 1,
		Outputs:    []artifacts.NamedObject{{Name: "stub", Digest: gguf.Digest, Size: gguf.Size}, {Name: "report", Digest: rep.Digest, Size: rep.Size}},
		Provenance: artifacts.Provenance{Host: "build-1", Start: testCreated, End: testCreated.Add(time.Second)}}
	if err := storeA.PutAction(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rc, err := Open(ctx, reg.Host+"/cache/nodes", oci.WithPlainHTTP(reg.Host))
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.PutAction(ctx, storeA, rec); err != nil {
		t.Fatal(err)
	}
	for _, o := range rec.Outputs { // the sha256 used for the layers is remembered beside each object
		if _, err := os.Stat(filepath.Join(storeA.Dir(), "digests", o.Digest.Hex()[:2], o.Digest.Hex())); err != nil {
			t.Errorf("%s: no digests record after publishing: %v", o.Name, err)
		}
	}
	sent := proxy.UploadBytes.Load()
	if err := rc.PutAction(ctx, storeA, rec); err != nil {
		t.Fatal(err)
	}
	if again := proxy.UploadBytes.Load() - sent; again != 0 {
		t.Errorf("publishing again sent %d bytes", again)
	}

	// A cleared cache: a new, empty store.
	storeB, err := artifacts.OpenStore(filepath.Join(t.TempDir(), "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer storeB.Close()
	if _, err := rc.GetAction(ctx, storeB, artifacts.SumBytes([]byte("other key"))); !errors.Is(err, artifacts.ErrNotFound) {
		t.Fatalf("unknown key: %v, want ErrNotFound", err)
	}

	// A registry that corrupts every object: the get fails and nothing enters the store.
	proxy.Set("flip", -1, 0)
	if _, err := rc.GetAction(ctx, storeB, key); err == nil {
		t.Fatal("get through a corrupting registry succeeded")
	}
	proxy.Set("", 0, 0)
	for _, o := range rec.Outputs {
		if _, err := storeB.Stat(ctx, o.Digest); !errors.Is(err, artifacts.ErrNotFound) {
			t.Fatalf("%s stored after a corrupt download: %v", o.Name, err)
		}
	}

	got, err := rc.GetAction(ctx, storeB, key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != key || len(got.Outputs) != 2 || got.Outputs[0] != rec.Outputs[0] || got.Provenance.Host != "build-1" {
		t.Fatalf("record: %+v", got)
	}
	want, _ := os.ReadFile(testfiles.Path(t, "stories260K.gguf"))
	r, err := storeB.Open(ctx, gguf.Digest)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("object from the remote cache differs (err %v)", err)
	}
}
