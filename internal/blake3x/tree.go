package blake3x

import (
	"fmt"
	"math/bits"
	"sync"

	"lukechampine.com/blake3/guts"
)

// A BLAKE3 input of n chunks (1 KiB each) is a left-complete binary tree: a node over n > 1 chunks
// has as left child the complete subtree of the largest power of two of chunks below n, and the
// rest as right child. Cut into pieces of 2^k chunks, every full piece is a complete subtree, so
// pieces can be hashed on separate cores (or by separate downloads) and their chaining values
// merged in order; the result is bit-identical to hashing the whole input serially (tree_test.go
// checks that against zeebo/blake3 for many sizes). This package is the one implementation of that
// tree in orkpipe: the store's parallel file hash, the registry's range digests and its
// verification of files assembled from ranges (through artifacts), and ork/pack's entry digests
// (Sum256, Hasher) all use it.
//
// The SIMD work is the wide kernel (wide.go, AVX-512) or lukechampine.com/blake3/guts:
// CompressBuffer hashes 16 consecutive chunks at once (8 with AVX2, portable Go elsewhere) and
// merges them into their subtree node.

// PieceSize is the unit of parallel hashing: 4096 BLAKE3 chunks (4 MiB), a power of two, so that
// every full piece aligned to the start of an input is a complete subtree of its BLAKE3 tree.
const PieceSize = 4 << 20

// ChunkSize is the BLAKE3 chunk size in bytes: SubtreeCV and PieceHasher count positions in chunks.
const ChunkSize = guts.ChunkSize

// groupLen is the input of one guts.CompressBuffer call: 16 chunks.
const groupLen = guts.MaxSIMD * guts.ChunkSize

// ChainValue is a BLAKE3 chaining value: the first 8 output words of a non-root node, the value
// that stands for a complete subtree (a piece, a range of pieces) when merging towards the root.
type ChainValue = [8]uint32

// SubtreeCV returns the chaining value of data hashed as the subtree whose first chunk has index
// chunk (data starts at byte chunk*1024 of the whole input). The caller guarantees that it is a
// proper subtree of a larger input: chunk is a multiple of the power of two at or above data's
// chunk count, and the whole input is longer than data. Only the last piece of an input may have
// a length that is not a power-of-two number of chunks.
func SubtreeCV(data []byte, chunk uint64) ChainValue {
	if len(data) == 0 {
		panic(fmt.Sprintf("blake3x: empty subtree at chunk %d", chunk))
	}
	if wideKernel {
		return subtreeCVWide(data, chunk)
	}
	return subtreeCVGuts(data, chunk)
}

// subtreeCVGuts is SubtreeCV with guts.CompressBuffer (AVX2 or portable Go), where the CPU lacks
// AVX-512 (see wide.go).
func subtreeCVGuts(data []byte, chunk uint64) ChainValue {
	ngroups := (len(data) + groupLen - 1) / groupLen
	var small [64]ChainValue
	cvs := small[:0]
	if ngroups > len(small) {
		cvs = make([]ChainValue, 0, ngroups)
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
	return MergeCVs(cvs)
}

// MergeCVs merges the chaining values of consecutive complete subtrees of one power-of-two size
// (the last may be smaller) into the chaining value of the non-root node above them all. Given
// the values of the pieces of an aligned power-of-two span of an input, it returns the span's.
func MergeCVs(cvs []ChainValue) ChainValue {
	if len(cvs) == 1 {
		return cvs[0]
	}
	p := splitPoint(len(cvs))
	return guts.ChainingValue(guts.ParentNode(MergeCVs(cvs[:p]), MergeCVs(cvs[p:]), &guts.IV, 0))
}

// splitPoint is the number of leading subtrees in the left child of a node over n >= 2 of them:
// the largest power of two below n.
func splitPoint(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// Root merges the chaining values of two or more consecutive complete subtrees of one power-of-two
// size (the last may be smaller; as MergeCVs) into the 32-byte BLAKE3 root hash of their
// concatenation. It panics on fewer than two: an input of one piece or less has no such split.
func Root(pieces []ChainValue) [32]byte {
	if len(pieces) < 2 {
		panic("blake3x: Root needs at least two subtrees")
	}
	p := splitPoint(len(pieces))
	n := guts.ParentNode(MergeCVs(pieces[:p]), MergeCVs(pieces[p:]), &guts.IV, guts.FlagRoot)
	w := guts.WordsToBytes(guts.CompressNode(n))
	var sum [32]byte
	copy(sum[:], w[:32])
	return sum
}

// PieceHasher hashes consecutive bytes of an input, starting at a piece boundary, into the
// chaining values of the pieces they cover, as the bytes arrive: whole 16-chunk groups are
// compressed straight from the caller's buffer (a byte is hashed while it is still in the CPU
// cache), so nothing but a partial group is copied. Zeros stands for a run of zero bytes (a file
// hole). The values are those SubtreeCV gives for the same bytes, so they merge with MergeCVs
// and Root. Not safe for concurrent use.
type PieceHasher struct {
	chunk  uint64 // index of the first chunk of the piece being hashed
	fed    int    // bytes of that piece absorbed (carry included)
	groups int    // whole groups of that piece compressed
	carry  [groupLen]byte
	nc     int          // bytes in carry
	cvs    []ChainValue // the piece's chunk values (wide kernel) or group values (guts)
	done   []ChainValue
}

// NewPieceHasher returns a hasher of the bytes of an input from offset off, a multiple of PieceSize.
func NewPieceHasher(off int64) (*PieceHasher, error) {
	if off < 0 || off%PieceSize != 0 {
		return nil, fmt.Errorf("blake3x: piece hasher at offset %d: not a multiple of %d", off, PieceSize)
	}
	return &PieceHasher{chunk: uint64(off / ChunkSize), cvs: make([]ChainValue, 0, PieceSize/ChunkSize)}, nil
}

// Write hashes p, the next bytes of the input. It never fails.
func (h *PieceHasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if h.fed == PieceSize { // more input follows: the full piece is a proper subtree
			h.closePiece()
		}
		k := min(len(p), PieceSize-h.fed)
		h.absorb(p[:k])
		p = p[k:]
	}
	return n, nil
}

// Zeros hashes n zero bytes, the next bytes of the input.
func (h *PieceHasher) Zeros(n int64) {
	for n > 0 {
		k := min(n, int64(len(zeroPiece())))
		h.Write(zeroPiece()[:k])
		n -= k
	}
}

// Pieces finishes the piece in progress (the input's last, shorter piece) and returns the
// chaining values of every piece hashed, in order. Call it after the last byte; the hasher must
// not be written to afterwards.
func (h *PieceHasher) Pieces() []ChainValue {
	h.closePiece()
	return h.done
}

// absorb hashes b, bytes that all belong to the piece in progress.
func (h *PieceHasher) absorb(b []byte) {
	h.fed += len(b)
	for len(b) > 0 {
		if h.nc == 0 && len(b) >= groupLen {
			h.group((*[groupLen]byte)(b))
			b = b[groupLen:]
			continue
		}
		k := copy(h.carry[h.nc:], b)
		h.nc += k
		b = b[k:]
		if h.nc == groupLen {
			h.group(&h.carry)
			h.nc = 0
		}
	}
}

// group compresses the next whole group of 16 chunks of the piece.
func (h *PieceHasher) group(buf *[groupLen]byte) {
	counter := h.chunk + uint64(h.groups*guts.MaxSIMD)
	h.groups++
	if wideKernel {
		n := len(h.cvs)
		h.cvs = h.cvs[:n+guts.MaxSIMD]
		chunks16((*[guts.MaxSIMD]ChainValue)(h.cvs[n:]), buf, counter)
		return
	}
	h.cvs = append(h.cvs, guts.ChainingValue(guts.CompressBuffer(buf, groupLen, &guts.IV, counter, 0)))
}

// closePiece hashes the partial group left in carry (only at the end of the input) and merges the
// piece's values into its chaining value, as SubtreeCV does.
func (h *PieceHasher) closePiece() {
	if h.fed == 0 {
		return
	}
	h.flushCarry()
	var cv ChainValue
	if wideKernel {
		cv = mergeLevels(h.cvs)
	} else {
		cv = MergeCVs(h.cvs)
	}
	h.done = append(h.done, cv)
	h.chunk += PieceSize / ChunkSize
	h.fed, h.groups, h.nc, h.cvs = 0, 0, 0, h.cvs[:0]
}

// chunkValues hashes the partial group left in carry and returns the chunk chaining values of the
// piece in progress, the input's only piece (Hasher.Sum256; wide kernel only). The hasher must not
// be written to afterwards.
func (h *PieceHasher) chunkValues() []ChainValue {
	h.flushCarry()
	return h.cvs
}

// flushCarry hashes the partial group left in carry (only at the end of the input) into h.cvs.
func (h *PieceHasher) flushCarry() {
	if h.nc > 0 {
		counter := h.chunk + uint64(h.groups*guts.MaxSIMD)
		if wideKernel {
			for off := 0; off < h.nc; off += ChunkSize {
				c := guts.CompressChunk(h.carry[off:min(off+ChunkSize, h.nc)], &guts.IV, counter+uint64(off/ChunkSize), 0)
				h.cvs = append(h.cvs, guts.ChainingValue(c))
			}
		} else {
			clear(h.carry[h.nc:]) // CompressBuffer reads a whole group; the tail is padding
			h.cvs = append(h.cvs, guts.ChainingValue(guts.CompressBuffer(&h.carry, h.nc, &guts.IV, counter, 0)))
		}
		h.nc = 0
	}
}

// zeroPiece is a piece of zero bytes (Zeros' input).
var zeroPiece = sync.OnceValue(func() []byte { return make([]byte, PieceSize) })
