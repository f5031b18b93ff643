package registry

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/registry/regtest"
)

// TestPushManyShortCompressedExtents: a sparse, compressible file made of many short data extents (the
// shape of a real stub: small norm and embedding tensors between large holes). The compressed bytes
// uploaded must be exactly the bytes whose digest the manifest names; the encoder's output depends on
// how its input is chunked, so hashing and uploading share one encoding path (encodeFrame).
func TestPushManyShortCompressedExtents(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "stub.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	text := bytes.Repeat([]byte("orkpipe stub data segment "), 600) // compressible, 15600 bytes
	for i := int64(0); i < 300; i++ {
		if _, err := f.WriteAt(text[:8000+(i*37)%7000], i*(64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(300 * (64 << 10)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res, err := Push(ctx, src, reg.Ref("packs/extents", "v1"), plain(reg), testRange, WithJobs(2), WithCreated(testCreated))
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	file, _ := res.Artifact.File("stub.gguf")
	if file.Form != FormTarZstd || len(file.Ranges) < 2 || len(file.Extents) != 300 {
		t.Fatalf("want a tar+zstd layer of 300 extents in several ranges, got %s, %d extents, %d ranges", file.Form, len(file.Extents), len(file.Ranges))
	}
	dst := t.TempDir()
	if _, err := Pull(ctx, reg.Ref("packs/extents", "v1"), dst, plain(reg)); err != nil {
		t.Fatalf("pull: %v", err)
	}
	sameFiles(t, src, dst)
}
