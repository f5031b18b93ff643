package daggerexec_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
	"orkpipe/pipelines/daggerexec"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/engine/executortest"
	"orkpipe/stages"
)

// writeSparse writes a file of size bytes holding data at each offset of at, holes elsewhere, and
// returns it as a stages.File.
func writeSparse(t *testing.T, path string, size int64, data []byte, at ...int64) stages.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range at {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	return closeAndHash(t, f)
}

// closeAndHash closes f and returns it as a stages.File.
func closeAndHash(t *testing.T, f *os.File) stages.File {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	obj, err := artifacts.HashPath(context.Background(), f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return stages.File{Path: f.Name(), Digest: obj.Digest, Size: obj.Size}
}

// TestSparseInputInTarForm (no engine: the fake session): an input with holes is uploaded as its
// tar form, named <hex>.tar in its directory, made of its data only; an input without holes as
// the store object itself. The tar form reads back into the input's bytes, and Close removes it.
func TestSparseInputInTarForm(t *testing.T) {
	noEngineEnv(t)
	fake := startFakeSession(t, "failed\n")
	ctx := context.Background()
	store := executortest.OpenStore(t)
	x, err := daggerexec.New(ctx, store, daggerexec.WithBinary(goBinary(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	dir := t.TempDir()
	data := bytes.Repeat([]byte("stub data "), 1000) // 10000 bytes: three 4 KiB blocks each
	stub := writeSparse(t, filepath.Join(dir, "stub.gguf"), 8<<20, data, 0, 3<<20, 8<<20-int64(len(data)))
	text := writeSparse(t, filepath.Join(dir, "text"), 3<<20, bytes.Repeat([]byte("x"), 3<<20), 0)
	m := stages.KeyMaterial{Stage: "demo-join", Version: 1, Params: []byte(`{}`), Inputs: map[string]artifacts.Digest{"a": stub.Digest, "b": text.Digest},
		Numerics: executortest.Numerics(t)}
	key, _ := m.Key()
	if _, err := x.Execute(ctx, engine.ExecRequest{Key: key, Material: m, Inputs: map[string]stages.File{"a": stub, "b": text}}); err == nil {
		t.Fatal("the fake session's exec failure was reported as a success")
	}
	st := x.Stats()
	if st.TarInputs != 1 || st.HolesLeftOut != 8<<20-9*4096 {
		t.Errorf("stats %+v, want 1 input in tar form leaving out %d zero bytes", st, 8<<20-9*4096)
	}
	fake.mu.Lock()
	all := strings.Join(fake.queries, "\n")
	fake.mu.Unlock()
	var archive string
	for _, q := range fake.queries {
		if i := strings.Index(q, stub.Digest.Hex()+`.tar")`); i >= 0 && strings.Contains(q, "host") {
			j := strings.LastIndex(q[:i], `"`)
			archive = q[j+1:i] + stub.Digest.Hex() + ".tar"
		}
	}
	textObj := filepath.Join(store.Dir(), "objects", text.Digest.Hex()[:2], text.Digest.Hex())
	if archive == "" || !hasCall(all, "withFile", `path:"`+stub.Digest.Hex()+`.tar"`) || !strings.Contains(all, `file(path:"`+textObj+`")`) ||
		!hasCall(all, "withFile", `path:"`+text.Digest.Hex()+`"`) {
		t.Fatalf("want the stub uploaded as <hex>.tar and the text as its store object %s:\n%s", textObj, all)
	}
	a, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := a.Stat()
	if max := int64(9*4096 + 4096); st2.Size() > max {
		t.Errorf("tar form of %d bytes for 9 blocks of data, want at most %d", st2.Size(), max)
	}
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = sparse.ReadTar(ctx, a, out)
	a.Close()
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	if obj, err := artifacts.HashPath(ctx, out.Name()); err != nil || obj.Digest != stub.Digest {
		t.Errorf("the tar form reads back as %v (%v), want %s", obj.Digest, err, stub.Digest)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(archive); !os.IsNotExist(err) {
		t.Errorf("the tar form outlived Close: %v", err)
	}
}
