package registry

import (
	"os"
	"path/filepath"
	"testing"

	"orkpipe/registry/regtest"
)

// TestResumeClearsHoles is probe finding F9: the partial file of an interrupted pull held non-zero
// bytes where the file has holes (in a journaled range and in one not yet fetched); a resumed pull
// hashed those holes as zeros without reading them and renamed the file with the stale bytes in
// place. The resumed pull must deliver the pushed file.
func TestResumeClearsHoles(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	const mib = 1 << 20
	// Four 4 MiB ranges, each with data and a hole.
	exts := []Extent{{Off: 0, Len: mib}, {Off: 5 * mib, Len: mib}, {Off: 9 * mib, Len: mib}, {Off: 13 * mib, Len: mib}}
	writeText(t, filepath.Join(src, "sparse.txt"), 16*mib, exts, 3)
	writeProvenance(t, src)
	ref := reg.Ref("packs/holes", "v1")
	res, err := Push(ctx, src, ref, plain(reg), testRange, WithCompression(CompressNever))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := res.Artifact.File("sparse.txt")
	if len(f.Ranges) != 4 || f.Form != FormTar {
		t.Fatalf("sparse.txt: %d ranges, form %s; want 4, tar", len(f.Ranges), f.Form)
	}

	// An interrupted pull's state: ranges 0 and 1 verified and journaled, 2 and 3 not; junk in a
	// hole of range 1 (journaled) and of range 2 (to fetch).
	dst := t.TempDir()
	state, err := openPartial(dst, res.Artifact.Digest.Hex)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(src, "sparse.txt"), state.dataPath("sparse.txt"))
	data, err := os.OpenFile(state.dataPath("sparse.txt"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{7 * mib, 11*mib + 4096} {
		if _, err := data.WriteAt([]byte("stale bytes in a hole"), off); err != nil {
			t.Fatal(err)
		}
	}
	data.Close()
	for k := range 2 {
		if err := state.record(f, k); err != nil {
			t.Fatal(err)
		}
	}
	state.close()

	if _, err := Pull(ctx, ref, dst, plain(reg)); err != nil {
		t.Fatal(err)
	}
	if got, want := "sha256:"+sha256File(t, filepath.Join(dst, "sparse.txt")), f.Digests.SHA256; got != want {
		t.Fatalf("resumed pull wrote sparse.txt with sha256 %s, pushed %s (stale bytes left in its holes)", got, want)
	}
}
