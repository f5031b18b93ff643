package blake3x

import (
	"math/rand/v2"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/internal/testfiles"
)

// TestChunks16 compares chunks16 (AVX-512 where the CPU has it) with the portable reference, at
// chunk counters that carry into the high 32 bits inside the group of 16.
func TestChunks16(t *testing.T) {
	skipWithoutWide(t)
	rng := rand.New(rand.NewPCG(11, 12))
	var in [groupLen]byte
	for i := range in {
		in[i] = byte(rng.Uint32())
	}
	for _, counter := range []uint64{0, 16, 4096, 1<<32 - 3, 1<<32 - 16, 1 << 32, 1<<40 + 7, rng.Uint64() >> 1} {
		var got, want [16]ChainValue
		chunks16(&got, &in, counter)
		chunks16Generic(&want, &in, counter)
		if got != want {
			t.Errorf("counter %d: chunks16 differs from the reference", counter)
		}
	}
}

// TestParents16 compares parents16 with the reference, also in place (out aliasing in), as
// mergeLevels uses it.
func TestParents16(t *testing.T) {
	skipWithoutWide(t)
	rng := rand.New(rand.NewPCG(13, 14))
	var in [32]ChainValue
	for i := range in {
		for j := range in[i] {
			in[i][j] = rng.Uint32()
		}
	}
	var got, want [16]ChainValue
	parents16(&got, &in)
	parents16Generic(&want, &in)
	if got != want {
		t.Fatalf("parents16 differs from the reference")
	}
	inPlace := in
	parents16((*[16]ChainValue)(inPlace[:16]), &inPlace)
	if [16]ChainValue(inPlace[:16]) != want {
		t.Fatalf("parents16 in place differs from the reference")
	}
}

// TestSubtreeWideMatchesGuts: the wide subtree hash and guts.CompressBuffer's agree on pieces of
// every shape that occurs (whole pieces at any position, and last pieces with partial groups and
// chunks), and the wide one gives the standard digest through rootOf (treeSum is checked against
// zeebo/blake3 in TestTreeMatchesSerial).
func TestSubtreeWideMatchesGuts(t *testing.T) {
	skipWithoutWide(t)
	rng := rand.New(rand.NewPCG(15, 16))
	data := make([]byte, PieceSize)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	lens := []int{1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 2 * ChunkSize, groupLen - 1, groupLen, groupLen + 1,
		17 * ChunkSize, 31*ChunkSize + 5, 33 * groupLen, 255*groupLen + 3, PieceSize / 2, PieceSize - 1, PieceSize}
	for range 10 {
		lens = append(lens, 1+rng.IntN(PieceSize))
	}
	for _, n := range lens {
		for _, chunk := range []uint64{PieceSize / ChunkSize, 7 * PieceSize / ChunkSize, 1 << 32} {
			if got, want := subtreeCVWide(data[:n], chunk), subtreeCVGuts(data[:n], chunk); got != want {
				t.Errorf("%d bytes at chunk %d: wide %x, guts %x", n, chunk, got, want)
			}
		}
	}
	// Whole inputs hashed with the wide subtrees only, against the serial hash.
	big := make([]byte, 3*PieceSize+groupLen+77)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	for _, n := range []int{PieceSize + 1, 2*PieceSize + ChunkSize, len(big)} {
		var cvs []ChainValue
		for off := 0; off < n; off += PieceSize {
			cvs = append(cvs, subtreeCVWide(big[off:min(off+PieceSize, n)], uint64(off/ChunkSize)))
		}
		if got, want := Root(cvs), blake3.Sum256(big[:n]); got != want {
			t.Errorf("%d bytes: wide tree %x, serial %x", n, got, want)
		}
	}
}

// skipWithoutWide skips a test of the wide kernel on a CPU that cannot run it (the assembly would
// fault with an illegal instruction); SubtreeCV then uses guts, which the other tests cover.
func skipWithoutWide(t *testing.T) {
	t.Helper()
	if !wideKernel {
		testfiles.SkipCPU(t, "neither AVX-512 nor AVX2 on this CPU: the wide kernels are not used")
	}
}

// FuzzWideKernels: for any group of 16 chunks, any counter and any 32 chaining values, the
// assembly (chunks16, parents16) equals the portable reference.
func FuzzWideKernels(f *testing.F) {
	f.Add([]byte("seed"), uint64(0))
	f.Add([]byte{0xff, 0, 0x80}, uint64(1<<32-5))
	f.Fuzz(func(t *testing.T, seed []byte, counter uint64) {
		skipWithoutWide(t)
		var in [groupLen]byte
		for i := range in { // spread the fuzzer's bytes over the group: every lane differs
			in[i] = byte(i*131) ^ byte(i>>10)
			if len(seed) > 0 {
				in[i] ^= seed[i%len(seed)]
			}
		}
		counter >>= 1 // counters of real inputs stay far below 2^63 chunks
		var got, want [16]ChainValue
		chunks16(&got, &in, counter)
		chunks16Generic(&want, &in, counter)
		if got != want {
			t.Fatalf("chunks16 differs from the reference at counter %d", counter)
		}
		var cvs [32]ChainValue
		for i := range cvs {
			for j := range cvs[i] {
				cvs[i][j] = uint32(in[(i*8+j)*4]) | uint32(in[(i*8+j)*4+1])<<8 | uint32(in[(i*8+j)*4+2])<<16 | uint32(in[(i*8+j)*4+3])<<24
			}
		}
		var pg, pw [16]ChainValue
		parents16(&pg, &cvs)
		parents16Generic(&pw, &cvs)
		if pg != pw {
			t.Fatalf("parents16 differs from the reference")
		}
	})
}
