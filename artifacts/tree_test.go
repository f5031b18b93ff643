package artifacts

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"
)

// treeSum hashes data the way hashParallel does (pieces of pieceSize, subtreeCV, rootOf), in memory.
func treeSum(data []byte) [32]byte {
	var cvs []cv
	for off := 0; off < len(data); off += pieceSize {
		end := min(off+pieceSize, len(data))
		cvs = append(cvs, subtreeCV(data[off:end], uint64(off/chunkLen)))
	}
	return rootOf(cvs)
}

// TestTreeMatchesSerial checks the parallel tree split against zeebo/blake3's serial hash for
// sizes around every boundary that matters: one byte into the second piece, partial and whole
// chunks and 16-chunk groups in the last piece, many pieces (odd and power-of-two counts).
func TestTreeMatchesSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 9*pieceSize+groupLen+5)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	sizes := []int{
		pieceSize + 1, pieceSize + chunkLen - 1, pieceSize + chunkLen, pieceSize + chunkLen + 1,
		pieceSize + groupLen - 1, pieceSize + groupLen, pieceSize + groupLen + 1, pieceSize + 5*chunkLen + 17,
		2 * pieceSize, 2*pieceSize + 1, 3*pieceSize - 1, 3 * pieceSize, 4 * pieceSize, 5*pieceSize + 3*groupLen + 100,
		8 * pieceSize, 8*pieceSize + 1, len(data),
	}
	for i := 0; i < 8; i++ {
		sizes = append(sizes, pieceSize+1+rng.IntN(len(data)-pieceSize-1))
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
	for _, size := range []int64{pieceSize + 1, 3*pieceSize + 4097, 6 * pieceSize} {
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
			if _, err := hashParallel(context.Background(), f, size+2*pieceSize+5, 2); err == nil {
				t.Errorf("%d bytes hashed as %d (mapped %v): no error", size, size+2*pieceSize+5, mapped)
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
	data := make([]byte, pieceSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("zeebo", func(b *testing.B) {
		b.SetBytes(pieceSize)
		for b.Loop() {
			blake3.Sum256(data)
		}
	})
	b.Run("guts", func(b *testing.B) {
		b.SetBytes(pieceSize)
		for b.Loop() {
			subtreeCVGuts(data, pieceSize/chunkLen)
		}
	})
	b.Run("wide", func(b *testing.B) {
		if !wideKernel {
			b.Skip("no AVX-512 on this CPU: subtreeCV uses guts")
		}
		b.SetBytes(pieceSize)
		for b.Loop() {
			subtreeCVWide(data, pieceSize/chunkLen)
		}
	})
}

// TestStreamHasher feeds NewStreamHasher in random-sized writes and checks its digest against
// zeebo/blake3 at sizes around the piece boundaries; Sum must not change the state.
func TestStreamHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	data := make([]byte, 3*pieceSize+groupLen+9)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, n := range []int{0, 1, chunkLen, pieceSize - 1, pieceSize, pieceSize + 1, 2 * pieceSize, 2*pieceSize + chunkLen + 3, 3 * pieceSize, len(data)} {
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
