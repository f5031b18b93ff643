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
// how its input is chunked, so hashing and uploading share one encoding path (encodePart). Before that,
// every push of such a file failed with a digest mismatch.
func TestPushManyShortCompressedExtents(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "stub.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	text := bytes.Repeat([]byte("orkpipe stub data segment "), 25) // compressible, 650 bytes
	for i := int64(0); i < 300; i++ {
		if _, err := f.WriteAt(text[:100+i%550], i*(64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(300 * (64 << 10)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res, err := Push(ctx, src, reg.Ref("packs/extents", "v1"), plain(reg), WithPartSize(1<<20), WithJobs(2), WithCreated(testCreated))
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	file, _ := res.Artifact.File("stub.gguf")
	if !file.Parts[0].Compressed() || len(file.Parts) < 2 {
		t.Fatalf("want a compressed file in several parts, got %d parts, compressed %v", len(file.Parts), file.Parts[0].Compressed())
	}
	dst := t.TempDir()
	if _, err := Pull(ctx, reg.Ref("packs/extents", "v1"), dst, plain(reg)); err != nil {
		t.Fatalf("pull: %v", err)
	}
	sameFiles(t, src, dst)
}
