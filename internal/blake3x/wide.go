package blake3x

import (
	"sync"

	"lukechampine.com/blake3/guts"
)

// The wide subtree hash (AVX-512, amd64): every 16 consecutive whole chunks of a piece are
// compressed at once into 16 chunk chaining values (chunks16), and the tree above them is merged
// level by level, 16 parent nodes at once (parents16). guts.CompressBuffer merges the 16 chunk
// values of each group itself, with 8-lane AVX2 and scalar code: on a 4 MiB piece that merge took
// about a fifth of the hash time (perf, 2 GiB file); here it is 1/16 of the chunk work.
//
// Merging level by level builds the same tree as MergeCVs: BLAKE3's tree is left-complete, so at
// every level the nodes pair up from the left and an odd last node moves up unchanged.

// pieceCVs holds the chunk chaining values of one piece (4096 x 32 bytes = 128 KiB); at most one per
// piece being hashed is in use (GOMAXPROCS, see pieceSlots).
var pieceCVs = sync.Pool{New: func() any { return new([PieceSize / ChunkSize]ChainValue) }}

// subtreeCVWide is SubtreeCV (same contract) with chunks16 and parents16.
func subtreeCVWide(data []byte, chunk uint64) ChainValue {
	nchunks := (len(data) + ChunkSize - 1) / ChunkSize
	var cvs []ChainValue
	if nchunks <= PieceSize/ChunkSize {
		p := pieceCVs.Get().(*[PieceSize / ChunkSize]ChainValue)
		defer pieceCVs.Put(p)
		cvs = p[:nchunks]
	} else {
		cvs = make([]ChainValue, nchunks)
	}
	chunkCVs(cvs, data, chunk)
	return mergeLevels(cvs)
}

// chunkCVs stores in cvs (one per chunk of data, the last may be partial) the chaining values of
// the chunks of data, whose first chunk has index chunk in its input.
func chunkCVs(cvs []ChainValue, data []byte, chunk uint64) {
	groups := len(data) / groupLen
	for g := range groups {
		chunks16((*[16]ChainValue)(cvs[g*guts.MaxSIMD:]), (*[groupLen]byte)(data[g*groupLen:]), chunk+uint64(g*guts.MaxSIMD))
	}
	// The last, partial group of the input's last piece: chunk by chunk.
	for i := groups * guts.MaxSIMD; i < len(cvs); i++ {
		off := i * ChunkSize
		cvs[i] = guts.ChainingValue(guts.CompressChunk(data[off:min(off+ChunkSize, len(data))], &guts.IV, chunk+uint64(i), 0))
	}
}

// mergeLevels merges the chaining values of consecutive chunks (or complete subtrees of one size)
// into the chaining value of the non-root node above them all, in place: cvs is overwritten.
func mergeLevels(cvs []ChainValue) ChainValue { return mergeTo(cvs, 1)[0] }

// mergeTo merges cvs as mergeLevels does, level by level in place, until at most top values are
// left (top 2: the two children of the node above them all) and returns them.
func mergeTo(cvs []ChainValue, top int) []ChainValue {
	n := len(cvs)
	for n > top {
		pairs := n / 2
		i := 0
		for ; i+guts.MaxSIMD <= pairs; i += guts.MaxSIMD {
			parents16((*[16]ChainValue)(cvs[i:]), (*[32]ChainValue)(cvs[2*i:]))
		}
		for ; i < pairs; i++ {
			cvs[i] = guts.ChainingValue(guts.ParentNode(cvs[2*i], cvs[2*i+1], &guts.IV, 0))
		}
		if n%2 == 1 {
			cvs[pairs] = cvs[n-1]
		}
		n = pairs + n%2
	}
	return cvs[:n]
}

// chunks16Generic is chunks16 in portable Go (the reference in tests, and off amd64).
func chunks16Generic(out *[16]ChainValue, in *[groupLen]byte, counter uint64) {
	for i := range out {
		out[i] = guts.ChainingValue(guts.CompressChunk(in[i*ChunkSize:(i+1)*ChunkSize], &guts.IV, counter+uint64(i), 0))
	}
}

// parents16Generic is parents16 in portable Go.
func parents16Generic(out *[16]ChainValue, in *[32]ChainValue) {
	for i := range out {
		out[i] = guts.ChainingValue(guts.ParentNode(in[2*i], in[2*i+1], &guts.IV, 0))
	}
}
