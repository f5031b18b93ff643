package stages

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"orkpipe/artifacts"
	"orkpipe/ork/calib"
)

// writeHessianFile writes the Hessian file of a K x K Hessian to path, a new file, with every core:
// the file's bytes before the digest are cut into the store's hash pieces (artifacts.PieceSize, aligned
// to the file's start), grouped into units of up to unitPieces consecutive pieces, and GOMAXPROCS
// workers each take the next unit, encode it with their own encoder (newEnc: calib.EncodeHessian's
// contract — a calib.Encoder, which also computes a pending last update, or EncodeHessian itself)
// straight into a shared writable mapping of that part of the file, hash each of its pieces as its
// BLAKE3 subtree (artifacts.SubtreeCV) while it is in cache, and unmap it. The pieces' chaining values
// then give the digest, written last: the same bytes calib.WriteHessian streams through one writer and
// one serial hash. The file is allocated whole first (fallocate), so a full disk is an error here,
// never a fault in a mapping; a fault all the same (an I/O error) is an error naming the range. Where
// the file system cannot allocate ahead (EOPNOTSUPP), each unit is encoded into a buffer and written
// with pwrite instead: the same bytes. On an error (a bad value: the lowest unit's, calib.ErrNotFinite)
// the file is left partial; the caller's output directory is discarded.
func writeHessianFile(ctx context.Context, path string, k int, newEnc func() hessianEncoder) (err error) {
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
	mapped := mapHessianFiles
	if mapped {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size+artifacts.DigestSize)
		if errors.Is(err, unix.EOPNOTSUPP) {
			mapped = false
		} else if err != nil {
			return fmt.Errorf("allocating %d bytes: %w", size+artifacts.DigestSize, err)
		}
	}
	const piece = artifacts.PieceSize
	n := (size + piece - 1) / piece
	workers := min(n, int64(runtime.GOMAXPROCS(0)))
	group := max(1, min(unitPieces, n/(2*workers))) // pieces a unit: at least two units a worker
	units := (n + group - 1) / group
	cvs := make([]artifacts.ChainValue, n)
	errs := make([]error, units)
	var whole artifacts.Digest          // the digest of a file of one piece (no tree to merge)
	hash := func(b []byte, off int64) { // the pieces of a unit starting at off
		for p := int64(0); p < int64(len(b)); p += piece {
			hashPiece(b[p:min(p+piece, int64(len(b)))], off+p, n, &cvs[(off+p)/piece], &whole)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(units, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			enc := newEnc()
			var buf []byte
			for {
				u := next.Add(1) - 1
				if u >= units || ctx.Err() != nil {
					return
				}
				off := u * group * piece
				ln := int(min(group*piece, size-off))
				var err error
				if mapped {
					err = encodeMapped(f, enc, off, ln, func(b []byte) { hash(b, off) })
				} else {
					if buf == nil {
						buf = make([]byte, min(group*piece, size))
					}
					b := buf[:ln]
					if err = enc(b, off); err == nil {
						hash(b, off)
						_, err = f.WriteAt(b, off)
					}
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

// hessianEncoder fills dst with bytes [off, off+len(dst)) of a Hessian file (calib.EncodeHessian's
// contract); one per goroutine.
type hessianEncoder func(dst []byte, off int64) error

// plainEncoder encodes a complete Hessian (calib.EncodeHessian).
func plainEncoder(h *calib.Hessian) func() hessianEncoder {
	return func() hessianEncoder {
		return func(dst []byte, off int64) error { return calib.EncodeHessian(h, dst, off) }
	}
}

// unitPieces is the most hash pieces a worker of writeHessianFile encodes at a time: 32 MiB, so that a
// calib.Encoder computing a pending update multiplies blocks of hundreds of rows.
const unitPieces = 8

// mapHessianFiles selects the mapped writer where the file system allows it; tests clear it to cover
// the pwrite path.
var mapHessianFiles = true

// hashPiece hashes the piece b at off of a file of n pieces: its subtree's chaining value into cv, or,
// for a file of one piece, its whole digest into whole.
func hashPiece(b []byte, off, n int64, cv *artifacts.ChainValue, whole *artifacts.Digest) {
	if n == 1 {
		*whole = artifacts.SumBytes(b)
		return
	}
	*cv = artifacts.SubtreeCV(b, uint64(off/artifacts.ChunkSize))
}

// encodeMapped maps bytes [off, off+n) of f (off a multiple of the page size) shared and writable,
// populates the pages at once (MADV_POPULATE_WRITE: a hint; pages fault one by one without it),
// encodes those bytes there with enc, calls done with them and unmaps them. A fault on the mapping is an
// error.
func encodeMapped(f *os.File, enc hessianEncoder, off int64, n int, done func([]byte)) (err error) {
	m, err := unix.Mmap(int(f.Fd()), off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping bytes [%d, %d): %w", off, off+int64(n), err)
	}
	defer func() {
		if uerr := unix.Munmap(m); err == nil && uerr != nil {
			err = fmt.Errorf("unmapping bytes [%d, %d): %w", off, off+int64(n), uerr)
		}
	}()
	_ = unix.Madvise(m, unix.MADV_POPULATE_WRITE)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r) // not a fault on the mapping: a bug, not an I/O error
			}
			err = fmt.Errorf("fault on the mapping of bytes [%d, %d): %v", off, off+int64(n), r)
		}
	}()
	if err := enc(m, off); err != nil {
		return err
	}
	done(m)
	return nil
}
