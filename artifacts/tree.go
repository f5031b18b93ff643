package artifacts

import (
	"fmt"
	"hash"

	"github.com/zeebo/blake3"

	"orkpipe/internal/blake3x"
)

// The BLAKE3 tree and its SIMD kernels are internal/blake3x's (shared with ork/pack, which may not
// import this package); the names below are the store's view of them.

// PieceSize is the unit of parallel hashing: 4096 BLAKE3 chunks (4 MiB), a power of two, so that
// every full piece aligned to the start of an input is a complete subtree of its BLAKE3 tree.
const PieceSize = blake3x.PieceSize

// ChunkSize is the BLAKE3 chunk size in bytes: SubtreeCV and PieceHasher count positions in chunks.
const ChunkSize = blake3x.ChunkSize

// ChainValue is a BLAKE3 chaining value: the first 8 output words of a non-root node, the value
// that stands for a complete subtree (a piece, a range of pieces) when merging towards the root.
type ChainValue = blake3x.ChainValue

// SubtreeCV returns the chaining value of data hashed as the subtree whose first chunk has index
// chunk (blake3x.SubtreeCV: the caller guarantees a proper subtree of a larger input).
func SubtreeCV(data []byte, chunk uint64) ChainValue { return blake3x.SubtreeCV(data, chunk) }

// MergeCVs merges the chaining values of consecutive complete subtrees of one power-of-two size
// (the last may be smaller) into the chaining value of the non-root node above them all.
func MergeCVs(cvs []ChainValue) ChainValue { return blake3x.MergeCVs(cvs) }

// PieceHasher hashes consecutive bytes of an input, from a piece boundary, into the chaining
// values of its pieces as the bytes arrive (blake3x.PieceHasher).
type PieceHasher = blake3x.PieceHasher

// NewPieceHasher returns a hasher of the bytes of an input from offset off, a multiple of PieceSize.
func NewPieceHasher(off int64) (*PieceHasher, error) { return blake3x.NewPieceHasher(off) }

// rootOf is blake3x.Root.
func rootOf(pieces []ChainValue) [32]byte { return blake3x.Root(pieces) }

// RootDigest returns the BLAKE3 digest of an input from the chaining values of its consecutive
// complete subtrees of one power-of-two size (the last may be smaller): its pieces, or aligned
// spans of pieces. An input of one piece or less has no such split: its digest is a plain hash of
// its bytes, and RootDigest refuses fewer than two values.
func RootDigest(cvs []ChainValue) (Digest, error) {
	if len(cvs) < 2 {
		return Digest{}, fmt.Errorf("artifacts: a BLAKE3 root needs at least two subtrees, got %d", len(cvs))
	}
	return Digest{sum: blake3x.Root(cvs)}, nil
}

// pieceHasher is a streaming BLAKE3-256 (hash.Hash) for long inputs: it buffers 4 MiB pieces and
// hashes each as a subtree with the SIMD code of SubtreeCV, keeping one chaining value per piece
// (32 bytes per 4 MiB), then merges them with rootOf. Inputs of at most one piece are hashed by
// zeebo/blake3 at Sum. The digest is the standard BLAKE3-256.
type pieceHasher struct {
	buf []byte       // the current piece, len = bytes buffered
	cvs []ChainValue // chaining values of the complete pieces before buf
}

// NewStreamHasher returns a BLAKE3-256 hasher for long streams (many MiB): the same digest as
// NewHasher, faster on CPUs with AVX-512, but it holds a buffer of up to 4 MiB. Its buffer grows
// with the stream up to smallStream and then takes its full size at once, so a stream that turns
// out short (a build node's small output) costs about its own size, not 4 MiB.
func NewStreamHasher() hash.Hash { return &pieceHasher{} }

// smallStream is how far a pieceHasher's buffer grows by doubling before it takes PieceSize.
const smallStream = 256 << 10

func (h *pieceHasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(h.buf) == PieceSize { // more input follows: the full piece is a proper subtree
			h.cvs = append(h.cvs, SubtreeCV(h.buf, uint64(len(h.cvs))*PieceSize/ChunkSize))
			h.buf = h.buf[:0]
		}
		k := min(len(p), PieceSize-len(h.buf))
		if need := len(h.buf) + k; need > cap(h.buf) {
			c := PieceSize
			if need <= smallStream {
				c = min(max(need, 2*cap(h.buf), 4<<10), smallStream)
			}
			h.buf = append(make([]byte, 0, c), h.buf...)
		}
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
		cvs = append(cvs[:len(cvs):len(cvs)], SubtreeCV(h.buf, uint64(len(h.cvs))*PieceSize/ChunkSize))
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
