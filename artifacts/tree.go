package artifacts

import (
	"fmt"
	"hash"
	"math/bits"

	"github.com/zeebo/blake3"
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
	if wideKernel {
		return subtreeCVWide(data, chunk)
	}
	return subtreeCVGuts(data, chunk)
}

// subtreeCVGuts is subtreeCV with guts.CompressBuffer (AVX2 or portable Go), where the CPU lacks
// AVX-512 (see wide.go).
func subtreeCVGuts(data []byte, chunk uint64) cv {
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

// pieceHasher is a streaming BLAKE3-256 (hash.Hash) for long inputs: it buffers 4 MiB pieces and
// hashes each as a subtree with the SIMD code of subtreeCV, keeping one chaining value per piece
// (32 bytes per 4 MiB), then merges them with rootOf. Inputs of at most one piece are hashed by
// zeebo/blake3 at Sum. The digest is the standard BLAKE3-256.
type pieceHasher struct {
	buf []byte // the current piece, len = bytes buffered
	cvs []cv   // chaining values of the complete pieces before buf
}

// NewStreamHasher returns a BLAKE3-256 hasher for long streams (many MiB): the same digest as
// NewHasher, faster on CPUs with AVX-512, but it holds a 4 MiB buffer. Use NewHasher for small data.
func NewStreamHasher() hash.Hash { return &pieceHasher{buf: make([]byte, 0, pieceSize)} }

func (h *pieceHasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(h.buf) == pieceSize { // more input follows: the full piece is a proper subtree
			h.cvs = append(h.cvs, subtreeCV(h.buf, uint64(len(h.cvs))*pieceSize/chunkLen))
			h.buf = h.buf[:0]
		}
		k := min(len(p), pieceSize-len(h.buf))
		h.buf = append(h.buf, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

// Sum appends the digest of everything written so far to b; the state is unchanged.
func (h *pieceHasher) Sum(b []byte) []byte {
	if len(h.cvs) == 0 {
		sum := blake3.Sum256(h.buf)
		return append(b, sum[:]...)
	}
	cvs := h.cvs
	if len(h.buf) > 0 {
		cvs = append(cvs[:len(cvs):len(cvs)], subtreeCV(h.buf, uint64(len(h.cvs))*pieceSize/chunkLen))
	}
	if len(cvs) == 1 { // exactly one full piece plus nothing: not possible (it would still be in buf)
		panic("artifacts: pieceHasher with one piece and no tail")
	}
	sum := rootOf(cvs)
	return append(b, sum[:]...)
}

func (h *pieceHasher) Reset()         { h.buf, h.cvs = h.buf[:0], h.cvs[:0] }
func (h *pieceHasher) Size() int      { return DigestSize }
func (h *pieceHasher) BlockSize() int { return 64 }
