package blake3x

import (
	"unsafe"

	"golang.org/x/sys/cpu"
	"lukechampine.com/blake3/guts"
)

// hash16AVX512 compresses 16 inputs at once, one per 32-bit lane of the AVX-512 registers: lane i
// reads nblocks 64-byte blocks at in + i*stride, with counter counter + i*cstep, flags on every
// block, fstart added on the first block and fend on the last, and stores its chaining value in
// out[i]. nblocks is 1..16. Input is read completely before out is written, so out may overlap in.
// (blake3_amd64.s, derived from lukechampine.com/blake3's guts.)
//
//go:noescape
func hash16AVX512(out *[16][8]uint32, in *byte, key *[8]uint32, counter uint64, stride uint64, nblocks uint64, cstep uint32, flags uint32, fstart uint32, fend uint32)

// hash8AVX2 is hash16AVX512 for eight lanes in AVX2 (hash8_amd64.s: guts' compressChunksAVX2 with
// its parameters, plain loads instead of gathers, and the rounds gen_rounds.go writes — go generate
// after changing it): lane i reads nblocks 64-byte blocks at in + i*stride, with counter
// counter + i*cstep, flags on every block, fstart added on the first block and fend on the last,
// and stores its chaining value in out[i]. nblocks is 1..16. Input is read completely before out
// is written, so out may overlap in.
//
//go:generate go run gen_rounds.go
//go:noescape
func hash8AVX2(out *[8][8]uint32, in *byte, key *[8]uint32, counter uint64, stride uint64, nblocks uint64, cstep uint32, flags uint32, fstart uint32, fend uint32)

// wide512 says whether chunks16 and parents16 run the AVX-512 code (x/sys/cpu also checks that the
// OS saves the ZMM registers); without it, with AVX2, chunks16 and parents16 run hash8AVX2 twice
// each.
var wide512 = cpu.X86.HasAVX512F

// wideKernel says whether the tree is hashed 16 chunks at a time with chunks16 and parents16 (AVX-512
// or AVX2). Without it, SubtreeCV uses guts.CompressBuffer (Go).
var wideKernel = wide512 || cpu.X86.HasAVX2

// chunks16 stores in out the chaining values of the 16 whole chunks in, the first of which has
// index counter in its input.
func chunks16(out *[16]ChainValue, in *[groupLen]byte, counter uint64) {
	if !wide512 {
		for h := range 2 {
			hash8AVX2((*[8][8]uint32)(out[8*h:]), &in[8*h*ChunkSize], &guts.IV, counter+uint64(8*h), ChunkSize, ChunkSize/guts.BlockSize, 1, 0, guts.FlagChunkStart, guts.FlagChunkEnd)
		}
		return
	}
	hash16AVX512(out, &in[0], &guts.IV, counter, ChunkSize, ChunkSize/guts.BlockSize, 1, 0, guts.FlagChunkStart, guts.FlagChunkEnd)
}

// parents16 stores in out[i] the chaining value of the parent node of in[2i] and in[2i+1]. out
// may alias the start of in.
func parents16(out *[16]ChainValue, in *[32]ChainValue) {
	if !wide512 {
		for h := range 2 { // the first writes out[:8], which only the first reads when out aliases in
			hash8AVX2((*[8][8]uint32)(out[8*h:]), (*byte)(unsafe.Pointer(&in[16*h])), &guts.IV, 0, 2*32, 1, 0, guts.FlagParent, 0, 0)
		}
		return
	}
	hash16AVX512(out, (*byte)(unsafe.Pointer(in)), &guts.IV, 0, 2*32, 1, 0, guts.FlagParent, 0, 0)
}
