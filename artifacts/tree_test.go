package artifacts

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"
)

// groupLen is a 16-chunk group, the wide kernel's unit (sizes around it are the boundaries tests
// probe).
const groupLen = 16 * ChunkSize

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
		for _, mode := range pieceModes {
			hashMode = mode
			for _, workers := range []int{1, 2, 5} {
				d, err := hashParallel(context.Background(), f, size, workers)
				if err != nil {
					t.Fatal(err)
				}
				if d != SumBytes(want) {
					t.Errorf("%d bytes, %v, %d workers: %s, want %s", size, mode, workers, d, SumBytes(want))
				}
			}
			// A file shorter than claimed (truncated meanwhile) is an error, not a digest or a crash.
			if _, err := hashParallel(context.Background(), f, size+2*PieceSize+5, 2); err == nil {
				t.Errorf("%d bytes hashed as %d (%v): no error", size, size+2*PieceSize+5, mode)
			} else {
				t.Logf("%v: %v", mode, err)
			}
		}
		hashMode = probePieces
		f.Close()
	}
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
	// Small writes through the buffer's growth: doubling up to smallStream, then the whole piece.
	for _, n := range []int{1000, smallStream - 1, smallStream, smallStream + 1, 300 << 10, PieceSize + 5} {
		h := NewStreamHasher()
		for off := 0; off < n; {
			k := min(n-off, 1+rng.IntN(9000))
			h.Write(data[off : off+k])
			off += k
		}
		want := blake3.Sum256(data[:n])
		if got := h.Sum(nil); string(got) != string(want[:]) {
			t.Errorf("%d bytes in small writes: %x, want %x", n, got, want)
		}
		if c := cap(h.(*pieceHasher).buf); n <= smallStream && c > max(2*n, 4<<10) {
			t.Errorf("%d bytes: a buffer of %d bytes, want at most twice the stream", n, c)
		}
	}
}
