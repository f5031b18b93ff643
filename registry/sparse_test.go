package registry

import (
	"net/http"
	"path/filepath"
	"reflect"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

func TestSubExtents(t *testing.T) {
	exts := []Extent{{Off: 0, Len: 4}, {Off: 100, Len: 8}, {Off: 200, Len: 3}}
	tests := []struct {
		at, n int64
		want  []Extent
	}{
		{0, 4, []Extent{{Off: 0, Len: 4}}},
		{2, 4, []Extent{{Off: 2, Len: 2}, {Off: 100, Len: 2}}},
		{4, 9, []Extent{{Off: 100, Len: 8}, {Off: 200, Len: 1}}},
		{14, 5, []Extent{{Off: 202, Len: 1}}},
	}
	for _, tc := range tests {
		if got := subExtents(exts, tc.at, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("subExtents(%d, %d) = %v, want %v", tc.at, tc.n, got, tc.want)
		}
	}
}

// TestPushSparse2GiBStub pushes a 2 GiB stub (a real GGUF header, tensor data with every other
// 64 KiB block a hole, 4 KiB at the very end: 610 KiB of data) and checks what travels: the
// registry receives the data extents plus the archive's header, map and trailer, nothing of the
// holes; the pull receives the same and recreates the holes (same allocated blocks).
func TestPushSparse2GiBStub(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "2 GiB stub skipped with -short")
	}
	ctx := ctxT(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	src := t.TempDir()
	stub := filepath.Join(src, "model.orkpack.gguf")
	data := makeSparseStub(t, testfiles.Path(t, "stories260K.gguf"), stub, 14176, 2<<30)
	ref := reg.Ref("packs/stub2g", "v1")
	res, err := Push(ctx, src, ref, plain(reg))
	if err != nil {
		t.Fatal(err)
	}
	f := res.Artifact.Files[0]
	sent := proxy.UploadBytes.Load()
	t.Logf("2 GiB stub: %d bytes written, %d in the filesystem's %d data extents, %s layer of %d bytes, %d bytes uploaded (config included), %d ranges",
		data, f.DataSize(), len(f.Extents), f.Form, f.StoredSize(), sent, len(f.Ranges))
	if f.Form != FormTar || f.DataSize() < data || f.DataSize() > data+int64(len(f.Extents))*4096 {
		t.Fatalf("stub pushed as %s with %d data bytes, want tar with the %d bytes written (rounded to blocks)", f.Form, f.DataSize(), data)
	}
	if overhead := sent - data; overhead < 0 || overhead > 16<<10 {
		t.Errorf("uploaded %d bytes for %d bytes of data: %d bytes of overhead, want at most 16 KiB", sent, data, overhead)
	}
	dst := filepath.Join(t.TempDir(), "out")
	pr, err := Pull(ctx, ref, dst, plain(reg))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Downloaded != f.StoredSize() {
		t.Errorf("pull received %d bytes, the layer is %d", pr.Downloaded, f.StoredSize())
	}
	if a, b := blocks(t, stub), blocks(t, filepath.Join(dst, f.Name)); a != b {
		t.Errorf("pulled stub has %d blocks allocated, the source %d", b, a)
	}
	sameFiles(t, src, dst)
}
