package blake3x

import (
	"math/rand/v2"
	"testing"

	"github.com/zeebo/blake3"
)

// sumSizes are input lengths around every boundary Sum256 and Hasher branch on: one chunk, a
// 16-chunk group, a piece, and inputs of several pieces with partial groups and chunks.
func sumSizes(rng *rand.Rand) []int {
	sizes := []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 2 * ChunkSize, 3*ChunkSize + 7, groupLen - 1, groupLen,
		groupLen + 1, 17*ChunkSize + 3, 33 * groupLen, PieceSize/2 + 5, PieceSize - 1, PieceSize, PieceSize + 1,
		PieceSize + ChunkSize, 2 * PieceSize, 2*PieceSize + groupLen + 9, 3*PieceSize + 1}
	for range 6 {
		sizes = append(sizes, rng.IntN(3*PieceSize+2))
	}
	return sizes
}

// TestSum256 and TestHasher: Sum256 and the streaming Hasher (fed in random-sized writes, some
// ending inside a group, some spanning pieces) give zeebo/blake3's digest at every boundary size,
// with the wide kernel and without.
func TestSum256(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	data := make([]byte, 3*PieceSize+2)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	kernels := []bool{false}
	if wideKernel {
		kernels = append(kernels, true)
	}
	defer setWideKernel(wideKernel)
	for _, wide := range kernels {
		setWideKernel(wide)
		for _, n := range sumSizes(rng) {
			want := blake3.Sum256(data[:n])
			if got := Sum256(data[:n]); got != want {
				t.Errorf("Sum256 of %d bytes (wide %v): %x, want %x", n, wide, got, want)
			}
			h := New()
			for off := 0; off < n; {
				k := min(n-off, rng.IntN(3*groupLen+1))
				if rng.IntN(8) == 0 {
					k = min(n-off, rng.IntN(PieceSize+groupLen))
				}
				h.Write(data[off : off+k])
				off += k
			}
			if got := h.Sum256(); got != want {
				t.Errorf("Hasher of %d bytes (wide %v): %x, want %x", n, wide, got, want)
			}
		}
	}
}

// FuzzSum256: for any input and any split into two writes (an entry's codes and scales), Sum256
// and Hasher equal zeebo/blake3.
func FuzzSum256(f *testing.F) {
	f.Add([]byte("seed"), uint32(0), uint32(1))
	f.Add([]byte{0xff, 0, 0x80}, uint32(ChunkSize+1), uint32(3))
	f.Add([]byte("x"), uint32(groupLen*2+5), uint32(groupLen))
	f.Fuzz(func(t *testing.T, seed []byte, n, split uint32) {
		size := int(n % (PieceSize + 3*groupLen))
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*131) ^ byte(i>>10)
			if len(seed) > 0 {
				data[i] ^= seed[i%len(seed)]
			}
		}
		want := blake3.Sum256(data)
		if got := Sum256(data); got != want {
			t.Fatalf("Sum256 of %d bytes: %x, want %x", size, got, want)
		}
		cut := 0
		if size > 0 {
			cut = int(split) % (size + 1)
		}
		h := New()
		h.Write(data[:cut])
		h.Write(data[cut:])
		if got := h.Sum256(); got != want {
			t.Fatalf("Hasher of %d bytes cut at %d: %x, want %x", size, cut, got, want)
		}
	})
}

// BenchmarkSum256 compares Sum256 with zeebo/blake3 on one core for an entry-sized input.
//
//	go test ./internal/blake3x -run '^$' -bench Sum256
func BenchmarkSum256(b *testing.B) {
	data := make([]byte, 48<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("zeebo", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			blake3.Sum256(data)
		}
	})
	b.Run("blake3x", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			Sum256(data)
		}
	})
}
