package blake3x

import (
	"github.com/zeebo/blake3"
	"lukechampine.com/blake3/guts"
)

// Sum256 returns the standard BLAKE3-256 digest of data (zeebo/blake3's Sum256, bit for bit):
// with the AVX-512 kernel above one chunk — up to one piece, every chunk's chaining value and the
// tree above them 16 at a time; above one piece, piece by piece (SubtreeCV) and Root — else with
// zeebo/blake3.
func Sum256(data []byte) [32]byte {
	switch {
	case !wide512 || len(data) <= ChunkSize:
		return blake3.Sum256(data)
	case len(data) > PieceSize:
		cvs := make([]ChainValue, 0, (len(data)+PieceSize-1)/PieceSize)
		for off := 0; off < len(data); off += PieceSize {
			cvs = append(cvs, SubtreeCV(data[off:min(off+PieceSize, len(data))], uint64(off/ChunkSize)))
		}
		return Root(cvs)
	}
	p := pieceCVs.Get().(*[PieceSize / ChunkSize]ChainValue)
	defer pieceCVs.Put(p)
	cvs := p[:(len(data)+ChunkSize-1)/ChunkSize]
	chunkCVs(cvs, data, 0)
	return rootOfTwo(mergeTo(cvs, 2))
}

// rootOfTwo is the root hash of the node whose children have the chaining values top[0], top[1].
func rootOfTwo(top []ChainValue) [32]byte {
	n := guts.ParentNode(top[0], top[1], &guts.IV, guts.FlagRoot)
	w := guts.WordsToBytes(guts.CompressNode(n))
	return [32]byte(w[:32])
}

// Hasher is a streaming BLAKE3-256 with Sum256's kernels: whole 16-chunk groups are hashed straight
// from the caller's buffers (PieceHasher), so a long input is read once and copied only where a
// write ends inside a group. Without AVX-512 it is zeebo/blake3's hasher (faster there than the
// AVX2 tree). The zero value is not usable: New. Not safe for concurrent use.
type Hasher struct {
	n     int64
	p     *PieceHasher
	zeebo *blake3.Hasher
}

// New returns a Hasher with nothing written.
func New() *Hasher {
	if !wide512 || !wideKernel { // (wideKernel is false only in tests: chunkValues needs it)
		return &Hasher{zeebo: blake3.New()}
	}
	p, _ := NewPieceHasher(0)
	return &Hasher{p: p}
}

// Write hashes b, the next bytes of the input. It never fails.
func (h *Hasher) Write(b []byte) (int, error) {
	if h.zeebo != nil {
		return h.zeebo.Write(b)
	}
	h.n += int64(len(b))
	return h.p.Write(b)
}

// Sum256 returns the digest of everything written. It ends the hasher: nothing may be written after.
func (h *Hasher) Sum256() [32]byte {
	switch {
	case h.zeebo != nil:
		var d [32]byte
		h.zeebo.Sum(d[:0])
		return d
	case h.n <= ChunkSize:
		return blake3.Sum256(h.p.carry[:h.n])
	case h.n > PieceSize:
		return Root(h.p.Pieces())
	}
	return rootOfTwo(mergeTo(h.p.chunkValues(), 2))
}
