package artifacts

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAdoptDigsHoles: AdoptFile stores every holeSpan-aligned all-zero span of a fully allocated
// file as a hole (as an executor's export arrives), keeps the bytes, and leaves data alone.
func TestAdoptDigsHoles(t *testing.T) {
	const span = holeSpan
	data := func(n int) []byte { return pattern("dig", n) }
	type region struct {
		off  int64
		data []byte
	}
	for _, tc := range []struct {
		name    string
		size    int64
		regions []region
		// wantHoles are the [off, end) ranges that must be holes afterwards; wantData the ranges
		// that must still hold data.
		wantHoles, wantData [][2]int64
	}{
		// A zero tail shorter than a filesystem block stays allocated (punching zeroes it).
		{"all zero", 3*span + 5, nil, [][2]int64{{0, 3 * span}}, nil},
		{"all data", 2*span + 1, []region{{0, data(2*span + 1)}}, nil, [][2]int64{{0, 2*span + 1}}},
		{"stub-like", 12 * span, []region{{0, data(span + 100)}, {8 * span, data(span)}},
			[][2]int64{{2 * span, 8 * span}, {9 * span, 12 * span}}, [][2]int64{{0, 2 * span}, {8 * span, 9 * span}}},
		{"zeros not aligned to a span stay", 2 * span, []region{{0, data(10)}, {span + span/2, data(10)}},
			nil, [][2]int64{{0, 2 * span}}},
		{"zero tail shorter than a span", 2*span + 100, []region{{0, data(span)}}, [][2]int64{{span, 2 * span}}, [][2]int64{{0, span}}},
		{"big: zero pieces between data", 3*PieceSize + 7, []region{{PieceSize - 3, data(6)}, {3 * PieceSize, data(7)}},
			[][2]int64{{0, PieceSize - span}, {PieceSize + span, 3 * PieceSize}}, [][2]int64{{PieceSize - span, PieceSize + span}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTestStore(t)
			ctx := context.Background()
			dir, err := s.TempDir(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "export")
			full := make([]byte, tc.size)
			for _, r := range tc.regions {
				copy(full[r.off:], r.data)
			}
			if err := os.WriteFile(p, full, 0o644); err != nil { // every byte written: no holes
				t.Fatal(err)
			}
			if hasHole(t, p, 0, tc.size) {
				t.Skip("the test filesystem made holes of written zeros")
			}
			o, err := s.AdoptFile(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if want := SumBytes(full); o.Digest != want || o.Size != tc.size {
				t.Fatalf("adopted %v, want %v (%d bytes)", o, want, tc.size)
			}
			obj := s.objectPath(o.Digest)
			if err := s.Verify(ctx, o.Digest); err != nil {
				t.Fatal(err)
			}
			for _, h := range tc.wantHoles {
				if !isHole(t, obj, h[0], h[1]) {
					t.Errorf("[%d, %d) is not a hole", h[0], h[1])
				}
			}
			for _, d := range tc.wantData {
				if hasHole(t, obj, d[0], d[1]) {
					t.Errorf("[%d, %d) lost data blocks to a hole", d[0], d[1])
				}
			}
		})
	}
}

// isHole reports whether [off, end) of the file at p holds no data (SEEK_DATA finds none there).
func isHole(t *testing.T, p string, off, end int64) bool {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return d >= end
}

// hasHole reports whether [off, end) of the file at p contains a hole.
func hasHole(t *testing.T, p string, off, end int64) bool {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := unix.Seek(int(f.Fd()), off, unix.SEEK_HOLE)
	if err != nil {
		t.Fatal(err)
	}
	return h < end
}

// BenchmarkDigHoles measures what AdoptFile's hole digging adds, on a 1 GiB file of incompressible
// data (nothing to punch: the common case of a pack) against hashing the same file (what AdoptFile
// costs anyway), in the same run, page cache warm. Report dig as a ratio to hash.
//
//	go test -run='^$' -bench=BenchmarkDigHoles -benchtime=5x ./artifacts
func BenchmarkDigHoles(b *testing.B) {
	const size = 1 << 30
	p := filepath.Join(b.TempDir(), "pack.bin")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, newPatternReader("dig-bench", size)); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("hash", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if _, err := hashOpenFile(ctx, f, size); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dig", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if n, err := digHoles(ctx, f, size); err != nil || n != 0 {
				b.Fatal(n, err)
			}
		}
	})
}
