package artifacts

import (
	"fmt"
	"math/bits"

	"lukechampine.com/blake3/guts"
)

// A BLAKE3 input of n chunks (1 KiB each) is a left-complete binary tree: a node over n > 1 chunks
// has as left child the complete subtree of the largest power of two of chunks below n, and the
// rest as right child. Cut into pieces of 2^k chunks, every full piece is a complete subtree, so
// pieces can be hashed on separate cores and their chaining values merged in order; the result is
// bit-identical to hashing the whole input serially (tree_test.go checks that against zeebo/blake3
// for many sizes).
//
// The SIMD work is lukechampine.com/blake3/guts: CompressBuffer hashes 16 consecutive chunks at
// once with AVX-512 (8 with AVX2, portable Go elsewhere) and merges them into their subtree node.

// chunkLen is the BLAKE3 chunk size in bytes.
const chunkLen = guts.ChunkSize

// groupLen is the input of one guts.CompressBuffer call: 16 chunks.
const groupLen = guts.MaxSIMD * guts.ChunkSize

// cv is a chaining value: the first 8 output words of a non-root node.
type cv = [8]uint32

// subtreeCV returns the chaining value of data hashed as the subtree whose first chunk has index
// chunk (data starts at byte chunk*chunkLen of the whole input). The caller guarantees that it is
// a proper subtree of a larger input: chunk is a multiple of the power of two at or above data's
// chunk count, and the whole input is longer than data. Only the last piece of an input may have
// a length that is not a power-of-two number of chunks.
func subtreeCV(data []byte, chunk uint64) cv {
	if len(data) == 0 {
		panic(fmt.Sprintf("artifacts: empty subtree at chunk %d", chunk))
	}
	ngroups := (len(data) + groupLen - 1) / groupLen
	var small [64]cv
	cvs := small[:0]
	if ngroups > len(small) {
		cvs = make([]cv, 0, ngroups)
	}
	var last [groupLen]byte
	for g := 0; g < ngroups; g++ {
		off := g * groupLen
		n := min(groupLen, len(data)-off)
		var buf *[groupLen]byte
		if n == groupLen {
			buf = (*[groupLen]byte)(data[off : off+groupLen])
		} else {
			copy(last[:], data[off:]) // CompressBuffer reads a whole group; the tail is padding
			buf = &last
		}
		node := guts.CompressBuffer(buf, n, &guts.IV, chunk+uint64(g*guts.MaxSIMD), 0)
		cvs = append(cvs, guts.ChainingValue(node))
	}
	return mergeCVs(cvs)
}

// mergeCVs merges the chaining values of consecutive groups (each a complete subtree of the same
// power-of-two size, except possibly the last, which is smaller) into the chaining value of the
// non-root node above them all.
func mergeCVs(cvs []cv) cv {
	if len(cvs) == 1 {
		return cvs[0]
	}
	p := splitPoint(len(cvs))
	return guts.ChainingValue(guts.ParentNode(mergeCVs(cvs[:p]), mergeCVs(cvs[p:]), &guts.IV, 0))
}

// splitPoint is the number of leading groups in the left child of a node over n >= 2 groups: the
// largest power of two below n.
func splitPoint(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// rootOf merges the chaining values of two or more consecutive pieces (as mergeCVs) into the
// 32-byte BLAKE3 root hash of their concatenation.
func rootOf(pieces []cv) [32]byte {
	if len(pieces) < 2 {
		panic("artifacts: rootOf needs at least two pieces")
	}
	p := splitPoint(len(pieces))
	n := guts.ParentNode(mergeCVs(pieces[:p]), mergeCVs(pieces[p:]), &guts.IV, guts.FlagRoot)
	w := guts.WordsToBytes(guts.CompressNode(n))
	var sum [32]byte
	copy(sum[:], w[:32])
	return sum
}
