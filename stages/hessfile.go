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

// writeHessianFile writes h to path, a new file, in calib's Hessian file format, with every core:
// the file's bytes before the digest are cut into the store's hash pieces (artifacts.PieceSize, aligned
// to the file's start), and GOMAXPROCS workers each take the next piece, encode it (calib.EncodeHessian,
// which checks every value) straight into a shared writable mapping of that piece of the file, hash it
// as its BLAKE3 subtree (artifacts.SubtreeCV) while it is in cache, and unmap it. The pieces' chaining
// values then give the digest, written last: the same bytes calib.WriteHessian streams through one
// writer and one serial hash. The file is allocated whole first (fallocate), so a full disk is an error
// here, never a fault in a mapping; a fault all the same (an I/O error) is an error naming the piece.
// Where the file system cannot allocate ahead (EOPNOTSUPP), each piece is encoded into a buffer and
// written with pwrite instead: the same bytes. On an error (a bad value: the lowest piece's,
// calib.ErrNotFinite) the file is left partial; the caller's output directory is discarded.
func writeHessianFile(ctx context.Context, path string, h *calib.Hessian) (err error) {
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
	size := calib.HessianDataSize(h.K)
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
	cvs := make([]artifacts.ChainValue, n)
	errs := make([]error, n)
	var whole artifacts.Digest // the digest of a file of one piece (no tree to merge)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, int64(runtime.GOMAXPROCS(0))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for {
				p := next.Add(1) - 1
				if p >= n || ctx.Err() != nil {
					return
				}
				off := p * piece
				ln := int(min(piece, size-off))
				var err error
				if mapped {
					err = encodeMapped(f, h, off, ln, func(b []byte) { hashPiece(b, off, n, &cvs[p], &whole) })
				} else {
					if buf == nil {
						buf = make([]byte, min(piece, size))
					}
					b := buf[:ln]
					if err = calib.EncodeHessian(h, b, off); err == nil {
						hashPiece(b, off, n, &cvs[p], &whole)
						_, err = f.WriteAt(b, off)
					}
				}
				if err != nil {
					errs[p] = err
					next.Store(n) // the others stop after their current piece
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
// encodes h's bytes there, calls done with them and unmaps them. A fault on the mapping is an error.
func encodeMapped(f *os.File, h *calib.Hessian, off int64, n int, done func([]byte)) (err error) {
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
	if err := calib.EncodeHessian(h, m, off); err != nil {
		return err
	}
	done(m)
	return nil
}
