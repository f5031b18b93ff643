package blake3x

import (
	"math/rand/v2"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/internal/testfiles"
)

// treeSum hashes data the way hashParallel does (pieces of PieceSize, SubtreeCV, rootOf), in memory.
func treeSum(data []byte) [32]byte {
	var cvs []ChainValue
	for off := 0; off < len(data); off += PieceSize {
		end := min(off+PieceSize, len(data))
		cvs = append(cvs, SubtreeCV(data[off:end], uint64(off/ChunkSize)))
	}
	return Root(cvs)
}

// TestTreeMatchesSerial checks the parallel tree split against zeebo/blake3's serial hash for
// sizes around every boundary that matters: one byte into the second piece, partial and whole
// chunks and 16-chunk groups in the last piece, many pieces (odd and power-of-two counts).
func TestTreeMatchesSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 9*PieceSize+groupLen+5)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	sizes := []int{
		PieceSize + 1, PieceSize + ChunkSize - 1, PieceSize + ChunkSize, PieceSize + ChunkSize + 1,
		PieceSize + groupLen - 1, PieceSize + groupLen, PieceSize + groupLen + 1, PieceSize + 5*ChunkSize + 17,
		2 * PieceSize, 2*PieceSize + 1, 3*PieceSize - 1, 3 * PieceSize, 4 * PieceSize, 5*PieceSize + 3*groupLen + 100,
		8 * PieceSize, 8*PieceSize + 1, len(data),
	}
	for i := 0; i < 8; i++ {
		sizes = append(sizes, PieceSize+1+rng.IntN(len(data)-PieceSize-1))
	}
	for _, n := range sizes {
		if got, want := treeSum(data[:n]), blake3.Sum256(data[:n]); got != want {
			t.Errorf("%d bytes: tree %x, serial %x", n, got, want)
		}
	}
}

// BenchmarkPieceCV reports the single-core throughput of the piece hash on one 4 MiB piece in
// memory, in the same run: zeebo/blake3 (AVX2), guts.CompressBuffer (AVX-512 or AVX2 with gathers,
// its own tree merge) and this package's wide tree (wide.go: hash16AVX512, or hash8AVX2 without
// AVX-512).
//
//	go test ./artifacts -run '^$' -bench PieceCV
func BenchmarkPieceCV(b *testing.B) {
	data := make([]byte, PieceSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("zeebo", func(b *testing.B) {
		b.SetBytes(PieceSize)
		for b.Loop() {
			blake3.Sum256(data)
		}
	})
	b.Run("guts", func(b *testing.B) {
		b.SetBytes(PieceSize)
		for b.Loop() {
			subtreeCVGuts(data, PieceSize/ChunkSize)
		}
	})
	b.Run("wide", func(b *testing.B) {
		if !wideKernel {
			testfiles.SkipCPU(b, "neither AVX-512 nor AVX2 on this CPU: SubtreeCV uses guts")
		}
		b.SetBytes(PieceSize)
		for b.Loop() {
			subtreeCVWide(data, PieceSize/ChunkSize)
		}
	})
}

// TestPieceHasher streams inputs through PieceHasher in random-sized writes, with zero runs fed
// by Zeros, from offset 0 and from a later piece, with the wide kernel and without: its piece
// values must equal SubtreeCV's, spans of them must merge into the span's SubtreeCV, and all of
// them into the serial BLAKE3 of the input.
func TestPieceHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	kernels := []bool{false}
	if wideKernel {
		kernels = append(kernels, true)
	}
	defer setWideKernel(wideKernel)
	for _, size := range []int{PieceSize + 1, 2 * PieceSize, 3*PieceSize + groupLen + 5, 4*PieceSize + ChunkSize - 3, 5*PieceSize + 100} {
		data := make([]byte, size)
		for i := range data {
			if (i/(300<<10))%3 != 1 { // every third 300 KiB run is zeros
				data[i] = byte(rng.Uint32())
			}
		}
		for _, wide := range kernels {
			setWideKernel(wide)
			var want []ChainValue
			for off := 0; off < size; off += PieceSize {
				want = append(want, SubtreeCV(data[off:min(off+PieceSize, size)], uint64(off/ChunkSize)))
			}
			for _, from := range []int{0, 2 * PieceSize} {
				if from >= size {
					continue
				}
				h, err := NewPieceHasher(int64(from))
				if err != nil {
					t.Fatal(err)
				}
				for off := from; off < size; {
					n := min(size-off, 1+rng.IntN(700<<10))
					if zero := allZero(data[off : off+n]); zero && rng.IntN(2) == 0 {
						h.Zeros(int64(n))
					} else {
						h.Write(data[off : off+n])
					}
					off += n
				}
				got := h.Pieces()
				if len(got) != len(want[from/PieceSize:]) {
					t.Fatalf("%d bytes from %d (wide %v): %d pieces, want %d", size, from, wide, len(got), len(want[from/PieceSize:]))
				}
				for i := range got {
					if got[i] != want[from/PieceSize+i] {
						t.Errorf("%d bytes from %d (wide %v): piece %d differs", size, from, wide, from/PieceSize+i)
					}
				}
			}
			if size > 2*PieceSize && MergeCVs(want[:2]) != SubtreeCV(data[:2*PieceSize], 0) {
				t.Errorf("%d bytes (wide %v): merged span of two pieces differs from its subtree value", size, wide)
			}
			d := Root(want)
			if d != blake3.Sum256(data) {
				t.Errorf("%d bytes (wide %v): root %x, serial %x", size, wide, d, blake3.Sum256(data))
			}
		}
	}
	if _, err := NewPieceHasher(PieceSize + 1); err == nil {
		t.Error("piece hasher at an unaligned offset: no error")
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
