package cacherepo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

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

// corruptBlob flips one byte of blob digest ("sha256:<hex>") in the registry's filesystem storage.
func corruptBlob(t *testing.T, reg *regtest.Registry, digest string) {
	t.Helper()
	hx := strings.TrimPrefix(digest, "sha256:")
	path := filepath.Join(reg.RootDir, "docker", "registry", "v2", "blobs", "sha256", hx[:2], hx, "data")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRegistryKeepsCorruptBlob is why PutAction salts (salted.go): the registry the tests run
// accepts a new upload of a digest whose stored bytes are corrupt, and of the same digest after
// deleting it, and serves the corrupt bytes after either.
func TestRegistryKeepsCorruptBlob(t *testing.T) {
	reg := regtest.Start(t, nil)
	data := bytes.Repeat([]byte("orkpipe object "), 4096)
	sum := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(sum[:])
	blob := "http://" + reg.Host + "/v2/cache/nodes/blobs/"
	upload := func() {
		t.Helper()
		resp, err := http.Post(blob+"uploads/", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, err := resp.Location()
		if err != nil {
			t.Fatalf("POST upload: HTTP %d: %v", resp.StatusCode, err)
		}
		q := loc.Query()
		q.Set("digest", d)
		loc.RawQuery = q.Encode()
		req, _ := http.NewRequest(http.MethodPut, loc.String(), bytes.NewReader(data))
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT %s: HTTP %d, want 201", d, resp.StatusCode)
		}
	}
	intact := func() bool {
		t.Helper()
		resp, err := http.Get(blob + d)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d, %v", d, resp.StatusCode, err)
		}
		return bytes.Equal(b, data)
	}
	upload()
	corruptBlob(t, reg, d)
	upload()
	if intact() {
		t.Fatal("uploading the blob again replaced its corrupt bytes: salting is not needed with this registry")
	}
	req, _ := http.NewRequest(http.MethodDelete, blob+d, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE %s: HTTP %d, want 202", d, resp.StatusCode)
	}
	upload()
	if intact() {
		t.Fatal("deleting and uploading the blob replaced its corrupt bytes: salting is not needed with this registry")
	}
}

// TestPutActionSaltsCorruptBlob: an object whose blob the registry serves corrupt is published
// again, by the Repo that found it corrupt, in a salted layer (generation 1) that another store then
// gets; a Repo that read the salted layer publishes it unchanged (it never goes back to the corrupt
// blob); a salted layer found corrupt in turn is replaced by generation 2, also by a Repo that
// never saw the object's own blob.
func TestPutActionSaltsCorruptBlob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := regtest.Start(t, nil)
	storeA, err := artifacts.OpenStore(filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer storeA.Close()
	want, err := os.ReadFile(testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := storeA.Ingest(ctx, bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	key := artifacts.SumBytes([]byte("salted node"))
	rec := artifacts.ActionRecord{Key: key, Stage: "emit-stub", Version: 1, Outputs: []artifacts.NamedObject{{Name: "stub", Digest: obj.Digest, Size: obj.Size}},
		Provenance: artifacts.Provenance{Host: "build-1", Start: testCreated, End: testCreated.Add(time.Second)}}
	open := func() *Repo {
		rc, err := Open(ctx, reg.Host+"/cache/nodes", oci.WithPlainHTTP(reg.Host), oci.WithRetries(2))
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	layer := func() v1.Descriptor {
		t.Helper()
		raw, _, err := open().r.GetManifest(ctx, tag(key))
		if err != nil {
			t.Fatal(err)
		}
		var m v1.Manifest
		if err := json.Unmarshal(raw, &m); err != nil || len(m.Layers) != 1 {
			t.Fatalf("manifest %s: %v", raw, err)
		}
		return m.Layers[0]
	}
	get := func(rc *Repo) error {
		t.Helper()
		store, err := artifacts.OpenStore(filepath.Join(t.TempDir(), "s"))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if _, err := rc.GetAction(ctx, store, key); err != nil {
			return err
		}
		r, err := store.Open(ctx, obj.Digest)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if b, err := io.ReadAll(r); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("object from the remote cache differs (%v)", err)
		}
		return nil
	}

	if err := open().PutAction(ctx, storeA, rec); err != nil {
		t.Fatal(err)
	}
	raw := layer()
	if raw.MediaType != MediaTypeObject {
		t.Fatalf("first layer: %s, want %s", raw.MediaType, MediaTypeObject)
	}
	for gen := 1; gen <= 2; gen++ {
		corrupt := layer()
		corruptBlob(t, reg, corrupt.Digest.String())
		rc := open()
		if err := get(rc); !errors.Is(err, oci.ErrDigestMismatch) {
			t.Fatalf("generation %d: get of a corrupt blob: %v, want ErrDigestMismatch", gen, err)
		}
		if err := rc.PutAction(ctx, storeA, rec); err != nil {
			t.Fatal(err)
		}
		l := layer()
		salt := raw.Digest.String()
		line := fmt.Sprintf("%s %d\n", salt, gen)
		if l.MediaType != MediaTypeSaltedObject || l.Annotations[AnnotationSalt] != salt || l.Annotations[AnnotationGeneration] != fmt.Sprint(gen) ||
			l.Size != int64(len(line))+obj.Size || l.Annotations[AnnotationObjectB3] != obj.Digest.String() {
			t.Fatalf("generation %d: republished layer %+v, want a salted layer of %s, salt %s", gen, l, obj.Digest, salt)
		}
		if h, _, _ := v1.SHA256(io.MultiReader(strings.NewReader(line), bytes.NewReader(want))); l.Digest != h {
			t.Fatalf("generation %d: salted layer %s, want the sha256 of the salt line and the object, %s", gen, l.Digest, h)
		}
		reader := open()
		if err := get(reader); err != nil {
			t.Fatalf("generation %d: get after republishing: %v", gen, err)
		}
		if err := reader.PutAction(ctx, storeA, rec); err != nil {
			t.Fatal(err)
		}
		if again := layer(); again.Digest != l.Digest {
			t.Fatalf("generation %d: a Repo that read the salted layer published %s (%s), want it unchanged", gen, again.Digest, again.MediaType)
		}
	}
}
