package b3

import (
	"io"
	"testing"

	"github.com/zeebo/blake3"
)

// parallelSum hashes data as pieces of piece bytes (a power-of-two number of chunks, at least 8),
// as the store does on several cores.
func parallelSum(data []byte, piece int) [32]byte {
	var cvs []CV
	for off := 0; off < len(data); off += piece {
		end := min(off+piece, len(data))
		cvs = append(cvs, SubtreeCV(data[off:end], uint64(off/ChunkLen)))
	}
	return Tree(cvs)
}

// TestTreeMatchesUpstream checks the piecewise hash against upstream zeebo/blake3 on sizes around
// every piece and chunk boundary that matters.
func TestTreeMatchesUpstream(t *testing.T) {
	data := make([]byte, 40*64<<10+3000)
	io.ReadFull(blake3.New().Digest(), data) // deterministic filler
	for _, piece := range []int{8 << 10, 16 << 10, 64 << 10} {
		var sizes []int
		for k := 1; k <= 17; k++ {
			for _, d := range []int{-1024, -1, 1, 2, 63, 64, 65, 1023, 1024, 1025, 5000, piece / 2} {
				if n := k*piece + d; n > piece && n <= len(data) {
					sizes = append(sizes, n)
				}
			}
			sizes = append(sizes, k*piece)
		}
		for _, n := range sizes {
			if n <= piece {
				continue
			}
			want := blake3.Sum256(data[:n])
			if got := parallelSum(data[:n], piece); got != want {
				t.Fatalf("piece %d, size %d: parallel %x, upstream %x", piece, n, got, want)
			}
		}
	}
}
