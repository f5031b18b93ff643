package artifacts

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"orkpipe/internal/testfiles"
)

// TestAdoptDigsHoles: AdoptFile stores every all-zero filesystem block of a fully allocated file
// as a hole (as an executor's export arrives), keeps the bytes, and leaves data blocks alone —
// scanning the file read (the default, and a build's) and mapped (hashMode mapPieces).
func TestAdoptDigsHoles(t *testing.T) {
	for _, mode := range pieceModes {
		t.Run(mode.String(), func(t *testing.T) {
			hashMode = mode
			defer func() { hashMode = probePieces }()
			testAdoptDigsHoles(t)
		})
	}
}

func testAdoptDigsHoles(t *testing.T) {
	blk := int64(os.Getpagesize()) // the test filesystem's block (checked below)
	data := func(n int64) []byte { return pattern("dig", int(n)) }
	type region struct {
		off  int64
		data []byte
	}
	for _, tc := range []struct {
		name    string
		size    int64
		regions []region
		// wantHoles are the [off, end) ranges that must be holes afterwards; wantData the ranges
		// that must still be allocated.
		wantHoles, wantData [][2]int64
	}{
		// A zero tail shorter than a block stays allocated (punching only zeroes it).
		{"all zero", 30*blk + 5, nil, [][2]int64{{0, 30 * blk}}, nil},
		{"all data", 20*blk + 1, []region{{0, data(20*blk + 1)}}, nil, [][2]int64{{0, 20*blk + 1}}},
		{"stub-like", 120 * blk, []region{{0, data(10*blk + 100)}, {80 * blk, data(10 * blk)}},
			[][2]int64{{11 * blk, 80 * blk}, {90 * blk, 120 * blk}}, [][2]int64{{0, 11 * blk}, {80 * blk, 90 * blk}}},
		{"a byte keeps its block", 20 * blk, []region{{0, data(10)}, {15*blk + 7, data(1)}},
			[][2]int64{{blk, 15 * blk}, {16 * blk, 20 * blk}}, [][2]int64{{0, blk}, {15 * blk, 16 * blk}}},
		{"zero tail", 2*blk + 100, []region{{0, data(blk)}}, [][2]int64{{blk, 2 * blk}}, [][2]int64{{0, blk}}},
		{"big: zeros across pieces", 3*PieceSize + 7, []region{{PieceSize - 3, data(6)}, {3 * PieceSize, data(7)}},
			[][2]int64{{0, PieceSize - blk}, {PieceSize + blk, 3 * PieceSize}}, [][2]int64{{PieceSize - blk, PieceSize + blk}}},
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
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil || int64(st.Blksize) != blk {
				testfiles.Need(t, "the test filesystem's block is %d bytes, not a page (%d): %v", st.Blksize, blk, err)
			}
			if hasHole(t, p, 0, tc.size) {
				testfiles.Need(t, "the test filesystem made holes of written zeros")
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
// data (nothing to punch: the common case of a pack; every block is still looked at) against hashing the same file (what AdoptFile
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
