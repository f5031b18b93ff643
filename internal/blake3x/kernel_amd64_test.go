package blake3x

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"
	"lukechampine.com/blake3/guts"

	"orkpipe/internal/testfiles"
)

// setWideKernel selects the wide kernels (AVX-512 or AVX2, when the CPU has them) or guts for the
// code under test.
func setWideKernel(on bool) { wideKernel = on }

// TestHash8AVX2 compares the AVX2 kernel with the portable reference on every CPU that has AVX2,
// AVX-512 ones included (where chunks16 and parents16 take hash16AVX512 instead): 8 chunks at
// counters that carry into the high 32 bits, and 8 parents, also in place (out aliasing in).
func TestHash8AVX2(t *testing.T) {
	if !cpu.X86.HasAVX2 {
		testfiles.SkipCPU(t, "no AVX2 on this CPU")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	var in [groupLen]byte
	for i := range in {
		in[i] = byte(rng.Uint32())
	}
	for _, counter := range []uint64{0, 8, 1<<32 - 3, 1<<32 - 8, 1 << 32, 1<<40 + 7, rng.Uint64() >> 1} {
		var got [8][8]uint32
		var want [16]ChainValue
		hash8AVX2(&got, &in[0], &guts.IV, counter, ChunkSize, ChunkSize/guts.BlockSize, 1, 0, guts.FlagChunkStart, guts.FlagChunkEnd)
		chunks16Generic(&want, &in, counter)
		if got != [8][8]uint32(want[:8]) {
			t.Errorf("counter %d: hash8AVX2's chunks differ from the reference", counter)
		}
	}
	var cvs [32]ChainValue
	for i := range cvs {
		for j := range cvs[i] {
			cvs[i][j] = rng.Uint32()
		}
	}
	var want [16]ChainValue
	parents16Generic(&want, &cvs)
	var got [8][8]uint32
	hash8AVX2(&got, (*byte)(unsafe.Pointer(&cvs[0])), &guts.IV, 0, 2*32, 1, 0, guts.FlagParent, 0, 0)
	if got != [8][8]uint32(want[:8]) {
		t.Fatal("hash8AVX2's parents differ from the reference")
	}
	inPlace := cvs
	hash8AVX2((*[8][8]uint32)(inPlace[:8]), (*byte)(unsafe.Pointer(&inPlace[0])), &guts.IV, 0, 2*32, 1, 0, guts.FlagParent, 0, 0)
	if [8]ChainValue(inPlace[:8]) != [8]ChainValue(want[:8]) {
		t.Fatal("hash8AVX2's parents in place differ from the reference")
	}
}
