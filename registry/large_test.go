package registry

import (
	"path/filepath"
	"testing"

	"orkpipe/registry/regtest"
)

// TestLargeFileParts pushes a generated 2 GiB file with a 256 MiB part size (8 layers, 4 jobs) and
// pulls it back byte-identical. Skipped with -short.
func TestLargeFileParts(t *testing.T) {
	if testing.Short() {
		t.Skip("2 GiB round trip skipped with -short")
	}
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "big.orkpack"), 2<<30, 42)
	ref := reg.Ref("packs/big", "v1")
	res, err := Push(ctx, src, ref, plain(reg), WithPartSize(256<<20), WithJobs(4), WithCreated(testCreated))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := res.Artifact.File("big.orkpack")
	if len(f.Parts) != 8 {
		t.Fatalf("%d parts, want 8", len(f.Parts))
	}
	for _, p := range f.Parts {
		if p.Compressed() {
			t.Errorf("part %d of random data compressed", p.Index)
		}
	}
	dst := filepath.Join(t.TempDir(), "out")
	pr, err := Pull(ctx, ref, dst, plain(reg), WithJobs(4))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Downloaded != 2<<30 {
		t.Errorf("downloaded %d bytes, want %d", pr.Downloaded, 2<<30)
	}
	sameFiles(t, src, dst)
}
