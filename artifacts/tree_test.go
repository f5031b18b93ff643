package artifacts

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"
)

// treeSum hashes data the way hashParallel does (pieces of PieceSize, SubtreeCV, rootOf), in memory.
func treeSum(data []byte) [32]byte {
	var cvs []ChainValue
	for off := 0; off < len(data); off += PieceSize {
		end := min(off+PieceSize, len(data))
		cvs = append(cvs, SubtreeCV(data[off:end], uint64(off/ChunkSize)))
	}
	return rootOf(cvs)
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

// TestHashParallelFile hashes files through hashParallel (pread of pieces on all CPUs, a hole in the
// middle and a short last piece) and compares with the serial hash of their logical bytes.
func TestHashParallelFile(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, size := range []int64{PieceSize + 1, 3*PieceSize + 4097, 6 * PieceSize} {
		want := make([]byte, size)
		for i := range want[:size/3] {
			want[i] = byte(rng.Uint32())
		}
		for i := size - size/4; i < size; i++ {
			want[i] = byte(rng.Uint32())
		}
		p := filepath.Join(dir, "f")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(want[:size/3], 0)
		f.WriteAt(want[size-size/4:], size-size/4) // the middle stays a hole
		for _, mapped := range []bool{true, false} {
			mmapPieces = mapped
			for _, workers := range []int{1, 2, 5} {
				d, err := hashParallel(context.Background(), f, size, workers)
				if err != nil {
					t.Fatal(err)
				}
				if d != SumBytes(want) {
					t.Errorf("%d bytes, mapped %v, %d workers: %s, want %s", size, mapped, workers, d, SumBytes(want))
				}
			}
			// A file shorter than claimed (truncated meanwhile) is an error, not a digest or a crash.
			if _, err := hashParallel(context.Background(), f, size+2*PieceSize+5, 2); err == nil {
				t.Errorf("%d bytes hashed as %d (mapped %v): no error", size, size+2*PieceSize+5, mapped)
			} else {
				t.Logf("mapped %v: %v", mapped, err)
			}
		}
		mmapPieces = true
		f.Close()
	}
}

// BenchmarkPieceCV reports the single-core throughput of the piece hash on one 4 MiB piece in
// memory, in the same run: zeebo/blake3 (AVX2), guts.CompressBuffer (AVX-512 with gathers, its
// own 8-lane tree merge) and, where the CPU has AVX-512, this package's wide kernel (wide.go).
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
			b.Skip("no AVX-512 on this CPU: SubtreeCV uses guts")
		}
		b.SetBytes(PieceSize)
		for b.Loop() {
			subtreeCVWide(data, PieceSize/ChunkSize)
		}
	})
}

// TestStreamHasher feeds NewStreamHasher in random-sized writes and checks its digest against
// zeebo/blake3 at sizes around the piece boundaries; Sum must not change the state.
func TestStreamHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	data := make([]byte, 3*PieceSize+groupLen+9)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, n := range []int{0, 1, ChunkSize, PieceSize - 1, PieceSize, PieceSize + 1, 2 * PieceSize, 2*PieceSize + ChunkSize + 3, 3 * PieceSize, len(data)} {
		h := NewStreamHasher()
		for off := 0; off < n; {
			k := min(n-off, 1+rng.IntN(3<<20))
			h.Write(data[off : off+k])
			off += k
			h.Sum(nil) // a Sum in the middle must not disturb the stream
		}
		want := blake3.Sum256(data[:n])
		if got := h.Sum(nil); string(got) != string(want[:]) {
			t.Errorf("%d bytes: %x, want %x", n, got, want)
		}
		if got := h.Sum([]byte("x")); string(got[1:]) != string(want[:]) || got[0] != 'x' {
			t.Errorf("%d bytes: second Sum differs", n)
		}
		h.Reset()
		h.Write(data[:100])
		if got, want := h.Sum(nil), blake3.Sum256(data[:100]); string(got) != string(want[:]) {
			t.Errorf("after Reset: %x, want %x", got, want)
		}
	}
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
			d, err := RootDigest(want)
			if err != nil {
				t.Fatal(err)
			}
			if d != SumBytes(data) {
				t.Errorf("%d bytes (wide %v): root %s, serial %s", size, wide, d, SumBytes(data))
			}
		}
	}
	if _, err := NewPieceHasher(PieceSize + 1); err == nil {
		t.Error("piece hasher at an unaligned offset: no error")
	}
	if _, err := RootDigest(make([]ChainValue, 1)); err == nil {
		t.Error("root of one piece: no error")
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
