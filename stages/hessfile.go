package stages

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"orkpipe/artifacts"
	"orkpipe/internal/hugebuf"
	"orkpipe/ork/calib"
)

// writeHessianFile writes the Hessian file of a K x K Hessian to path, a new file, with every core:
// the file's bytes before the digest are cut into the store's hash pieces (artifacts.PieceSize, aligned
// to the file's start), grouped into units of up to unitPieces consecutive pieces, and GOMAXPROCS
// workers each take the next unit, encode it into their own buffer with their own encoder (newEnc:
// calib.EncodeHessian's contract — a calib.Encoder, which also computes a pending last update, or
// EncodeHessian itself — and what releases it when the worker is done), hash each of its pieces as
// its BLAKE3 subtree (artifacts.SubtreeCV) while it is in cache, and write it at its offset with
// pwrite, in calls of at most writeChunk bytes. The pieces'
// chaining values then give the digest, written last: the same bytes calib.WriteHessian streams through
// one writer and one serial hash. The file is allocated whole first (fallocate, where the file system
// can), so that a full disk is an error before any encoding. On an error (a bad value: the lowest
// unit's, calib.ErrNotFinite) the file is left partial; the caller's output directory is discarded.
func writeHessianFile(ctx context.Context, path string, k int, newEnc func() (hessianEncoder, func())) (err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			err = fmt.Errorf("writing Hessian %s: %w", path, err)
		}
	}()
	size := calib.HessianDataSize(k)
	if err := preallocate(f, size+artifacts.DigestSize); err != nil {
		return fmt.Errorf("allocating %d bytes: %w", size+artifacts.DigestSize, err)
	}
	const piece = artifacts.PieceSize
	n := (size + piece - 1) / piece
	workers := min(n, int64(runtime.GOMAXPROCS(0)))
	group := max(1, min(unitPieces, n/(2*workers))) // pieces a unit: at least two units a worker
	units := (n + group - 1) / group
	cvs := make([]artifacts.ChainValue, n)
	errs := make([]error, units)
	var whole artifacts.Digest // the digest of a file of one piece (no tree to merge)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(units, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			enc, release := newEnc()
			defer release()
			// Outside the Go heap, in huge pages: a fresh 32 MiB unit buffer of the heap costs 8192 page
			// faults on every file (docs/performance-log.md, "Calibration, session 12").
			buf, free := hugebuf.Make[byte](int(min(group*piece, size)))
			defer free()
			for {
				u := next.Add(1) - 1
				if u >= units || ctx.Err() != nil {
					return
				}
				off := u * group * piece
				b := buf[:min(group*piece, size-off)]
				err := enc(b, off)
				if err == nil {
					for p := int64(0); p < int64(len(b)); p += piece {
						hashPiece(b[p:min(p+piece, int64(len(b)))], off+p, n, &cvs[(off+p)/piece], &whole)
					}
					err = writeChunks(f, b, off)
				}
				if err != nil {
					errs[u] = err
					next.Store(units) // the others stop after their current unit
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d := whole
	if n > 1 {
		if d, err = artifacts.RootDigest(cvs); err != nil {
			return err
		}
	}
	_, err = f.WriteAt(d.Bytes(), size)
	return err
}

// writeChunk is the most bytes writeChunks passes to one pwrite. The page cache takes folios no larger
// than a write, and on a virtual machine whose free memory the hypervisor reclaims (free page
// reporting) the first touch of a large folio costs several times that of small ones
// (docs/performance-log.md, "Calibration, session 10"); at 64 KiB the calls themselves cost little.
const writeChunk = 64 << 10

// writeChunks writes b at off in f in calls of at most writeChunk bytes.
func writeChunks(f *os.File, b []byte, off int64) error {
	for w := 0; w < len(b); w += writeChunk {
		if _, err := f.WriteAt(b[w:min(w+writeChunk, len(b))], off+int64(w)); err != nil {
			return err
		}
	}
	return nil
}

// hessianEncoder fills dst with bytes [off, off+len(dst)) of a Hessian file (calib.EncodeHessian's
// contract); one per goroutine.
type hessianEncoder func(dst []byte, off int64) error

// plainEncoder encodes a complete Hessian (calib.EncodeHessian); it holds nothing to release.
func plainEncoder(h *calib.Hessian) func() (hessianEncoder, func()) {
	return func() (hessianEncoder, func()) {
		return func(dst []byte, off int64) error { return calib.EncodeHessian(h, dst, off) }, func() {}
	}
}

// unitPieces is the most hash pieces a worker of writeHessianFile encodes at a time: 32 MiB, so that a
// calib.Encoder computing a pending update multiplies blocks of hundreds of rows.
const unitPieces = 8

// hashPiece hashes the piece b at off of a file of n pieces: its subtree's chaining value into cv, or,
// for a file of one piece, its whole digest into whole.
func hashPiece(b []byte, off, n int64, cv *artifacts.ChainValue, whole *artifacts.Digest) {
	if n == 1 {
		*whole = artifacts.SumBytes(b)
		return
	}
	*cv = artifacts.SubtreeCV(b, uint64(off/artifacts.ChunkSize))
}
