package registry

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

func TestRemoteCache(t *testing.T) {
	ctx := ctxT(t)
	proxy := &faultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.next = h; return proxy })
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
	rc, err := OpenRemoteCache(ctx, reg.Host+"/cache/nodes", plain(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.PutAction(ctx, storeA, rec); err != nil {
		t.Fatal(err)
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
	proxy.set("flip", -1, 0)
	if _, err := rc.GetAction(ctx, storeB, key); err == nil {
		t.Fatal("get through a corrupting registry succeeded")
	}
	proxy.set("", 0, 0)
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
