package stages

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"orkpipe/artifacts"
	"orkpipe/ork/calib"
)

// writeHessianFile writes h to path, a new file, in calib's Hessian file format, with every core:
// the file's bytes before the digest are cut into the store's hash pieces (artifacts.PieceSize, aligned
// to the file's start), and GOMAXPROCS workers each take the next piece, encode it (calib.EncodeHessian,
// which checks every value), hash it as its BLAKE3 subtree (artifacts.SubtreeCV) while it is still in
// cache, and write it at its offset. The pieces' chaining values then give the digest, written last:
// the same bytes calib.WriteHessian streams through one writer and one serial hash. On an error
// (a bad value: the lowest piece's, calib.ErrNotFinite) the file is left partial; the caller's output
// directory is discarded.
func writeHessianFile(ctx context.Context, path string, h *calib.Hessian) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
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
			buf := make([]byte, min(piece, size))
			for {
				p := next.Add(1) - 1
				if p >= n || ctx.Err() != nil {
					return
				}
				off := p * piece
				b := buf[:min(piece, size-off)]
				err := calib.EncodeHessian(h, b, off)
				if err == nil {
					if n == 1 {
						whole = artifacts.SumBytes(b)
					} else {
						cvs[p] = artifacts.SubtreeCV(b, uint64(off/artifacts.ChunkSize))
					}
					_, err = f.WriteAt(b, off)
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
