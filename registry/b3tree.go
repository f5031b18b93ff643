package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sync/errgroup"

	"orkpipe/artifacts"
)

// The whole-file BLAKE3 a pull checks is computed from the bytes as they stream in, in memory, in
// the same pass that hashes them by sha256 and writes them: no byte is read back from disk, and
// parts downloading in parallel hash their own bytes on their own goroutines.
//
// BLAKE3 hashes 1 KiB chunks into a left-complete binary tree. The file is cut into pieces of 4096
// chunks (4 MiB, a power of two, aligned to the file start): every full piece is then a complete
// subtree, whose chaining value depends only on its bytes and its position, and the root is merged
// from the pieces' chaining values in order (artifacts' BLAKE3 tree: SubtreeCV, PieceHasher,
// RootDigest; checked against serial BLAKE3 in b3tree_test.go). Each piece is hashed by whoever knows all its bytes:
//
//   - a piece in which exactly one part has data is hashed by that part as it streams (holes inside
//     the piece are zeros, known without reading);
//   - a piece without data (a hole of a sparse file) is hashed from zeros in memory, on its own
//     goroutine while the parts download;
//   - a piece in which two or more parts have data (a part boundary not on a piece boundary), and
//     the only piece of a file of at most 4 MiB (whose root is not a subtree), is read back from
//     the partial file once all the parts are verified: at most one piece per part boundary.
//
// A part's chaining values are kept only if the part verifies (its stored and decoded sha256 and
// sizes match): a retried part's values come from the attempt that passed, computed from the very
// bytes whose sha256 matched and that were written to the file at the same extents.

const (
	treePiece = artifacts.PieceSize // bytes per piece: 4096 chunks
	pieceHole = int32(-1)           // owner of a piece without data
	pieceSeam = int32(-2)           // owner of a piece hashed from disk after the parts
	maxPieces = int64(1<<31 - 1)    // owner indexes are int32
)

// treeZeros returns the bytes of a hole piece (allocated on first use).
var treeZeros = sync.OnceValue(func() []byte { return make([]byte, treePiece) })

// fileTree collects the pieces' chaining values of one file being pulled and merges them into its
// BLAKE3 once every piece has one.
type fileTree struct {
	file  File
	owner []int32 // per piece: the index of the only part with data in it, pieceHole or pieceSeam

	mu   sync.Mutex
	cvs  []artifacts.ChainValue
	have []bool

	holes chan error // the hole hasher's result; nil until started
}

// newFileTree plans the pieces of f: which part hashes which piece.
func newFileTree(f File) (*fileTree, error) {
	n := (f.Digests.Size + treePiece - 1) / treePiece
	if n > maxPieces {
		return nil, fmt.Errorf("%s: %d bytes is too large to verify (%d pieces of %d bytes)", f.Name, f.Digests.Size, n, treePiece)
	}
	t := &fileTree{file: f, owner: make([]int32, n), cvs: make([]artifacts.ChainValue, n), have: make([]bool, n)}
	for i := range t.owner {
		t.owner[i] = pieceHole
	}
	for i, p := range f.Parts {
		for _, e := range p.Extents {
			for k := e.Off / treePiece; k <= (e.End()-1)/treePiece; k++ {
				switch t.owner[k] {
				case pieceHole:
					t.owner[k] = int32(i)
				case int32(i), pieceSeam:
				default:
					t.owner[k] = pieceSeam
				}
			}
		}
	}
	if n == 1 { // the root of a one-piece file is not a subtree chaining value: hashed whole at the end
		t.owner[0] = pieceSeam
	}
	return t, nil
}

// startHoles hashes the hole pieces from zeros on a goroutine of its own; sum waits for it.
func (t *fileTree) startHoles(ctx context.Context) {
	t.holes = make(chan error, 1)
	go func() {
		for k, o := range t.owner {
			if o != pieceHole {
				continue
			}
			if err := ctx.Err(); err != nil {
				t.holes <- err
				return
			}
			start := int64(k) * treePiece
			cv := artifacts.SubtreeCV(treeZeros()[:min(treePiece, t.file.Digests.Size-start)], uint64(start/artifacts.ChunkSize))
			t.set(int64(k), cv)
		}
		t.holes <- nil
	}()
}

func (t *fileTree) set(k int64, cv artifacts.ChainValue) {
	t.mu.Lock()
	t.cvs[k], t.have[k] = cv, true
	t.mu.Unlock()
}

// commit keeps the chaining values a verified part computed.
func (t *fileTree) commit(pt *partTree) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range pt.done {
		t.cvs[d.piece], t.have[d.piece] = d.cv, true
	}
}

// sum returns the file's BLAKE3 once every part was committed: it waits for the hole hasher,
// reads the seam pieces back from f (the partial file) and merges. A piece without a value is an
// error naming it, never skipped.
func (t *fileTree) sum(ctx context.Context, f *os.File) (artifacts.Digest, error) {
	if t.holes != nil {
		select {
		case err := <-t.holes:
			t.holes <- err // sum may be asked again
			if err != nil {
				return artifacts.Digest{}, err
			}
		case <-ctx.Done():
			return artifacts.Digest{}, ctx.Err()
		}
	}
	size := t.file.Digests.Size
	switch len(t.owner) {
	case 0:
		return artifacts.SumBytes(nil), nil
	case 1:
		buf := make([]byte, size)
		if err := t.readPiece(f, 0, buf); err != nil {
			return artifacts.Digest{}, err
		}
		return artifacts.SumBytes(buf), nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for k, o := range t.owner {
		if o != pieceSeam {
			continue
		}
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			start := int64(k) * treePiece
			buf := make([]byte, min(treePiece, size-start))
			if err := t.readPiece(f, int64(k), buf); err != nil {
				return err
			}
			t.set(int64(k), artifacts.SubtreeCV(buf, uint64(start/artifacts.ChunkSize)))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return artifacts.Digest{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, ok := range t.have {
		if !ok {
			return artifacts.Digest{}, fmt.Errorf("%s: piece %d (bytes %d-%d) was never hashed", t.file.Name, k, int64(k)*treePiece, min(int64(k+1)*treePiece, size)-1)
		}
	}
	return artifacts.RootDigest(t.cvs)
}

// readPiece fills buf with the logical bytes of piece k of the file: the parts' extents read from
// f, zeros elsewhere.
func (t *fileTree) readPiece(f *os.File, k int64, buf []byte) error {
	start := k * treePiece
	end := start + int64(len(buf))
	clear(buf)
	for _, p := range t.file.Parts {
		for _, e := range p.Extents {
			lo, hi := max(e.Off, start), min(e.End(), end)
			if lo >= hi {
				continue
			}
			if n, err := f.ReadAt(buf[lo-start:hi-start], lo); int64(n) != hi-lo {
				if err == nil || errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return fmt.Errorf("read %s at %d: %w", f.Name(), lo, err)
			}
		}
	}
	return nil
}

// partTree hashes the pieces one part owns from the part's byte stream (the concatenated bytes
// of its extents, as written). It is an io.Writer; close must be called after the last byte.
type partTree struct {
	ft   *fileTree
	part int32
	exts []Extent
	i    int   // extent being written
	off  int64 // bytes of exts[i] written
	cur  int64 // piece being hashed, -1 for none
	fed  int64 // bytes of piece cur hashed so far
	h    *artifacts.PieceHasher
	done []pieceValue
}

type pieceValue struct {
	piece int64
	cv    artifacts.ChainValue
}

// newPart returns the hasher of part index's stream (one per download attempt).
func (t *fileTree) newPart(index int) *partTree {
	p := t.file.Parts[index]
	return &partTree{ft: t, part: int32(index), exts: p.Extents, cur: -1}
}

func (pt *partTree) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if pt.i >= len(pt.exts) {
			return n - len(p), fmt.Errorf("%w: more bytes than the part's extents hold", ErrDigestMismatch)
		}
		e := pt.exts[pt.i]
		k := min(int64(len(p)), e.Len-pt.off)
		pt.data(e.Off+pt.off, p[:k])
		pt.off += k
		p = p[k:]
		if pt.off == e.Len {
			pt.i++
			pt.off = 0
		}
	}
	return n, nil
}

// data hashes b, the bytes at file offset off, into the pieces this part owns.
func (pt *partTree) data(off int64, b []byte) {
	size := pt.ft.file.Digests.Size
	for len(b) > 0 {
		k := off / treePiece
		start := k * treePiece
		end := min(start+treePiece, size)
		n := min(int64(len(b)), end-off)
		if pt.ft.owner[k] == pt.part {
			if pt.cur != k {
				pt.closePiece()
				pt.cur, pt.fed = k, 0
				pt.h, _ = artifacts.NewPieceHasher(start) // start is a multiple of the piece size
			}
			pt.h.Zeros(off - start - pt.fed) // a hole inside the piece, before these bytes
			pt.h.Write(b[:n])
			pt.fed = off - start + n
			if start+pt.fed == end {
				pt.closePiece()
			}
		}
		off += n
		b = b[n:]
	}
}

// close finishes the piece in progress (its rest is a hole). Call it after the last Write.
func (pt *partTree) close() { pt.closePiece() }

func (pt *partTree) closePiece() {
	if pt.cur < 0 {
		return
	}
	start := pt.cur * treePiece
	end := min(start+treePiece, pt.ft.file.Digests.Size)
	pt.h.Zeros(end - start - pt.fed)
	pt.done = append(pt.done, pieceValue{pt.cur, pt.h.Pieces()[0]})
	pt.cur, pt.h = -1, nil
}
