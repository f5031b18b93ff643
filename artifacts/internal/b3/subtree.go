package b3

import (
	"fmt"
	"math/bits"

	"orkpipe/artifacts/internal/b3/internal/alg"
	"orkpipe/artifacts/internal/b3/internal/consts"
)

// ChunkLen is the BLAKE3 chunk size in bytes.
const ChunkLen = consts.ChunkLen

// CV is a chaining value: the 8-word output of a non-root node.
type CV [8]uint32

// SubtreeCV returns the chaining value of data hashed as the subtree whose first chunk has index
// chunk (so data starts at byte chunk*ChunkLen of the whole input). The caller guarantees that
// this is a subtree of the whole input's tree: chunk is a multiple of the largest power of two
// not above len(data)'s chunk count and more input follows or precedes it. data must not be
// empty, and (chunk == 0 && len(data) <= ChunkLen) is the whole input, not a subtree.
func SubtreeCV(data []byte, chunk uint64) CV {
	if len(data) == 0 || chunk == 0 && len(data) <= ChunkLen {
		panic(fmt.Sprintf("b3.SubtreeCV: %d bytes at chunk %d is not a proper subtree", len(data), chunk))
	}
	var h hasher
	h.key = consts.IV
	h.chunks = chunk
	h.update(data)
	var d Digest
	h.finalizeDigest(&d) // the node's output state, with the root flag set last
	d.flags &^= consts.Flag_Root
	var out [16]uint32
	alg.Compress(&d.chain, &d.block, d.counter, d.blen, d.flags, &out)
	var cv CV
	copy(cv[:], out[:8])
	return cv
}

// parent returns the output words of the parent node of left and right.
func parent(left, right CV, root bool) [16]uint32 {
	var block [16]uint32
	copy(block[:8], left[:])
	copy(block[8:], right[:])
	flags := consts.Flag_Parent
	if root {
		flags |= consts.Flag_Root
	}
	chain := [8]uint32(consts.IV)
	var out [16]uint32
	alg.Compress(&chain, &block, 0, consts.BlockLen, flags, &out)
	return out
}

// Tree merges the chaining values of consecutive pieces of 2^k chunks each (the last piece may
// be shorter) into the 32-byte BLAKE3 root hash of their concatenation. It needs at least two
// pieces; a single piece is a whole input and must be hashed as such.
func Tree(pieces []CV) [32]byte {
	if len(pieces) < 2 {
		panic("b3.Tree: fewer than two pieces")
	}
	var stack []CV
	for i, cv := range pieces[:len(pieces)-1] {
		stack = append(stack, cv)
		// After i+1 complete pieces, merge one level per trailing zero bit (complete subtrees).
		for n := bits.TrailingZeros64(uint64(i + 1)); n > 0; n-- {
			l, r := stack[len(stack)-2], stack[len(stack)-1]
			out := parent(l, r, false)
			stack = append(stack[:len(stack)-2], CV(out[:8]))
		}
	}
	right := pieces[len(pieces)-1]
	for len(stack) > 1 {
		out := parent(stack[len(stack)-1], right, false)
		right = CV(out[:8])
		stack = stack[:len(stack)-1]
	}
	out := parent(stack[0], right, true)
	var sum [32]byte
	for i, w := range out[:8] {
		sum[4*i], sum[4*i+1], sum[4*i+2], sum[4*i+3] = byte(w), byte(w>>8), byte(w>>16), byte(w>>24)
	}
	return sum
}
