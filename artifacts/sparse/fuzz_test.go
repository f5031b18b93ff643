package sparse

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadTar: ReadTar never panics; what it accepts is the tar form of what it wrote, byte for
// byte (WriteTar of the file it produced gives the archive back).
func FuzzReadTar(f *testing.F) {
	for i, c := range []tarCase{
		{"plain", 700, full(700)},
		{"empty", 0, nil},
		{"stub.gguf", 64 << 10, []Extent{{0, 1024}, {8192, 512}, {60 << 10, 100}}},
		{"ends-in-hole.gguf", 64 << 10, []Extent{{4096, 512}}},
		{"holes-only.gguf", 1 << 20, nil},
	} {
		_, a := tarFile(c, uint64(i))
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, archive []byte) {
		dir := t.TempDir()
		dst, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		e, err := ReadTar(context.Background(), bytes.NewReader(archive), dst)
		if err != nil {
			return
		}
		var w bytes.Buffer
		if _, err := WriteTar(context.Background(), &w, dst, e.Name, e.Size, e.Extents); err != nil {
			t.Fatalf("accepted %q (%d bytes, %v) but cannot write it back: %v", e.Name, e.Size, e.Extents, err)
		}
		if !bytes.Equal(w.Bytes(), archive) {
			t.Fatalf("accepted an archive that is not the tar form of %q (%d bytes, %v)", e.Name, e.Size, e.Extents)
		}
	})
}
