package artifacts

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestKernelCopy copies a sparse file (data segments at unaligned offsets, a trailing hole) with
// the kernel path (reflink or copy_file_range) and with the user-space fallback, and checks that
// both copies have the source's logical bytes and that copyAndHash returns their BLAKE3.
func TestKernelCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	const size = 40<<20 + 12345
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, size)
	for _, seg := range [][2]int{{0, 3<<20 + 7}, {9 << 20, 5 << 20}, {17<<20 + 4097, 11<<20 + 3}} {
		b := want[seg[0] : seg[0]+seg[1]]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if _, err := f.WriteAt(b, int64(seg[0])); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, kernel := range []bool{true, false} {
		out, err := os.Create(filepath.Join(dir, "dst"))
		if err != nil {
			t.Fatal(err)
		}
		if kernel {
			d, err := copyAndHash(context.Background(), in, out, size)
			if err != nil {
				t.Fatal(err)
			}
			if d != SumBytes(want) {
				t.Fatalf("copyAndHash digest %s, want %s", d, SumBytes(want))
			}
		} else if err := kernelCopy(context.Background(), in, out, size, true, false); err != nil {
			t.Fatal(err)
		}
		out.Close()
		got, err := os.ReadFile(out.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("kernel=%v: copy differs from the source (%d bytes, want %d)", kernel, len(got), len(want))
		}
		os.Remove(out.Name())
	}
}
