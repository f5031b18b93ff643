package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/artifacts"
)

// treeLayout is a file of size bytes whose data lives in exts (zeros elsewhere), split into parts
// of at most partSize data bytes as push splits it.
type treeLayout struct {
	name     string
	size     int64
	exts     []Extent
	partSize int64
}

func treeLayouts() []treeLayout {
	const mib = 1 << 20
	full := func(n int64) []Extent { return []Extent{{0, n}} }
	var sparse []Extent // 64 KiB data every 192 KiB, then a long hole, then a tail
	for off := int64(8 << 10); off < 20*mib; off += 192 << 10 {
		sparse = append(sparse, Extent{off, 64 << 10})
	}
	sparse = append(sparse, Extent{40*mib + 4096, 3*mib + 17})
	return []treeLayout{
		{"empty", 0, nil, mib},
		{"one byte", 1, full(1), mib},
		{"one chunk", 1024, full(1024), mib},
		{"one piece exactly", treePiece, full(treePiece), mib},
		{"one piece, odd, many parts", treePiece - 1, full(treePiece - 1), 100_000},
		{"piece plus one", treePiece + 1, full(treePiece + 1), treePiece},
		{"aligned parts", 16 * mib, full(16 * mib), 4 * mib},
		{"one part per two pieces", 24*mib + 5, full(24*mib + 5), 8 * mib},
		{"unaligned parts", 21*mib + 999, full(21*mib + 999), 3*mib + 12345},
		{"parts smaller than a group", 9*mib + 3, full(9*mib + 3), 65_537},
		{"single part", 13*mib + 77, full(13*mib + 77), 64 * mib},
		{"sparse, small parts", 45 * mib, sparse, 300 << 10},
		{"sparse, one part", 45 * mib, sparse, 64 * mib},
		{"sparse, aligned parts", 45 * mib, sparse, 4 * mib},
		{"hole only", 30*mib + 1, nil, mib},
		{"data at the end only", 30 * mib, []Extent{{29 * mib, mib}}, 256 << 10},
	}
}

// layoutFile writes the layout's file (random data in its extents) and returns its bytes and the
// File pull would see.
func layoutFile(t *testing.T, l treeLayout, path string, seed uint64) ([]byte, File) {
	t.Helper()
	b := make([]byte, l.size)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, e := range l.exts {
		for i := e.Off; i < e.End(); i++ {
			b[i] = byte(rng.Uint32())
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f := File{Name: filepath.Base(path), Digests: FileDigests{Size: l.size}}
	for i, pe := range splitExtents(l.exts, l.partSize) {
		f.Parts = append(f.Parts, Part{Index: i, Extents: pe, RawSize: extentsLen(pe)})
	}
	if len(f.Parts) == 0 {
		f.Parts = []Part{{Index: 0}}
	}
	return b, f
}

// partStream returns the concatenated bytes of p's extents in b.
func partStream(b []byte, p Part) []byte {
	var s []byte
	for _, e := range p.Extents {
		s = append(s, b[e.Off:e.End()]...)
	}
	return s
}

// TestFileTreeMatchesBLAKE3 hashes files of many sizes and sparse layouts part by part, as a
// parallel pull does (parts committed in a shuffled order, each written in random-sized blocks),
// and checks the merged digest against serial BLAKE3 of the whole file.
func TestFileTreeMatchesBLAKE3(t *testing.T) {
	ctx := context.Background()
	for li, l := range treeLayouts() {
		t.Run(l.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			b, f := layoutFile(t, l, path, uint64(li))
			want := blake3.Sum256(b)
			fd, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer fd.Close()
			ft, err := newFileTree(f)
			if err != nil {
				t.Fatal(err)
			}
			ft.startHoles(ctx)
			rng := rand.New(rand.NewPCG(uint64(li), 2))
			for _, i := range rng.Perm(len(f.Parts)) {
				s := partStream(b, f.Parts[i])
				pt := ft.newPart(i)
				for len(s) > 0 {
					n := min(len(s), 1+rng.IntN(3*16<<10))
					if _, err := pt.Write(s[:n]); err != nil {
						t.Fatal(err)
					}
					s = s[n:]
				}
				pt.close()
				ft.commit(pt)
			}
			got, err := ft.sum(ctx, fd)
			if err != nil {
				t.Fatal(err)
			}
			if got.Hex() != fmt.Sprintf("%x", want) {
				t.Fatalf("merged %s, serial BLAKE3 %x (%d parts)", got, want, len(f.Parts))
			}
			// The same file checked by checkLocal's path (a resumed pull: parts read from disk).
			ft2, _ := newFileTree(f)
			ft2.startHoles(ctx)
			for i, p := range f.Parts {
				p.RawSHA256 = sha256Hex(partStream(b, p))
				pt := ft2.newPart(i)
				if !checkLocal(ctx, fd, p, pt) {
					t.Fatalf("checkLocal rejected intact part %d", i)
				}
				ft2.commit(pt)
			}
			if got2, err := ft2.sum(ctx, fd); err != nil || got2 != got {
				t.Fatalf("resumed: %v %v, want %s", got2, err, got)
			}
		})
	}
}

// TestFileTreeDetects checks that the merged digest changes when one byte of one part differs, and
// that a missing part is an error naming the piece, not a digest.
func TestFileTreeDetects(t *testing.T) {
	ctx := context.Background()
	l := treeLayout{"unaligned", 21<<20 + 999, []Extent{{0, 21<<20 + 999}}, 8<<20 + 12345}
	path := filepath.Join(t.TempDir(), "f")
	b, f := layoutFile(t, l, path, 9)
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	want := artifacts.SumBytes(b)
	var seams, detected int
	for _, flip := range []int64{0, 5 << 20, 8<<20 + 12344, l.size - 1} {
		ft, _ := newFileTree(f)
		ft.startHoles(ctx)
		for i, p := range f.Parts {
			s := partStream(b, p)
			if o := p.Extents[0].Off; flip >= o && flip < o+int64(len(s)) {
				s = append([]byte(nil), s...)
				s[flip-o] ^= 0x40
			}
			pt := ft.newPart(i)
			pt.Write(s)
			pt.close()
			ft.commit(pt)
		}
		got, err := ft.sum(ctx, fd)
		if err != nil {
			t.Fatal(err)
		}
		// A flipped byte inside a seam piece is read back from the (intact) file: only flips in
		// pieces hashed from the stream can show (in a pull, the stream's sha256 catches all).
		seam := ft.owner[flip/treePiece] == pieceSeam
		if (got == want) != seam {
			t.Errorf("flip at %d (seam piece: %v): digest %s, intact %s", flip, seam, got, want)
		}
		if seam {
			seams++
		} else {
			detected++
		}
	}
	if seams != 1 || detected != 3 {
		t.Errorf("%d flips in seams, %d in streamed pieces; want 1 and 3", seams, detected)
	}
	ft, _ := newFileTree(f)
	ft.startHoles(ctx)
	for i, p := range f.Parts[1:] { // part 0 never committed
		pt := ft.newPart(i + 1)
		pt.Write(partStream(b, p))
		pt.close()
		ft.commit(pt)
	}
	if _, err := ft.sum(ctx, fd); err == nil {
		t.Fatal("sum succeeded without part 0")
	} else {
		t.Logf("error: %v", err)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
