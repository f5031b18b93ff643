package nodeexec

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
)

// TestUnpackKeepsHoles: an input unpacked from its tar form has the input's bytes and only its
// data allocated (the stage reads a file as sparse as the one sent), until close removes it.
func TestUnpackKeepsHoles(t *testing.T) {
	ctx := context.Background()
	const size = 8 << 20
	content := make([]byte, size)
	copy(content[100:], "GGUF header")
	copy(content[5<<20:], bytes.Repeat([]byte("tensor "), 3000))
	d := artifacts.SumBytes(content)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exts, err := sparse.ContentExtents(ctx, f, size)
	if err != nil {
		t.Fatal(err)
	}
	inDir := t.TempDir()
	os.MkdirAll(filepath.Join(inDir, d.Hex()), 0o755)
	archive, err := os.Create(filepath.Join(inDir, d.Hex(), d.Hex()+TarSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sparse.WriteTar(ctx, archive, f, d.Hex(), size, exts); err != nil {
		t.Fatal(err)
	}
	archive.Close()

	r := &resolver{inDir: inDir, scratchRoot: t.TempDir()}
	files, err := r.resolve(ctx, map[string]artifacts.Digest{"model": d})
	if err != nil {
		t.Fatal(err)
	}
	p := files["model"].Path
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("unpacked %s: %d bytes (%v), not the input's", p, len(got), err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if alloc, data := st.Sys().(*syscall.Stat_t).Blocks*512, sparse.Len(exts); alloc > data+1<<20 {
		t.Errorf("unpacked %s: %d bytes allocated for %d bytes of data in %d", p, alloc, data, size)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the unpacked input outlived close: %v", err)
	}
}
