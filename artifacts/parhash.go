package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"orkpipe/artifacts/internal/b3"
)

// pieceSize is the unit of parallel hashing: 4096 BLAKE3 chunks, a power of two, so that every
// full piece is a complete subtree of the file's BLAKE3 tree (see internal/b3).
const pieceSize = 4 << 20

var piecePool = sync.Pool{New: func() any { b := make([]byte, pieceSize); return &b }}

// hashParallel hashes f (size bytes, more than one piece) with workers goroutines, each preading
// whole pieces and computing their subtree chaining values; the values are merged in order into
// the root. The digest is identical to a serial BLAKE3 of the same bytes.
func hashParallel(ctx context.Context, f *os.File, size int64, workers int) (Digest, error) {
	n := (size + pieceSize - 1) / pieceSize
	cvs := make([]b3.CV, n)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(int64(workers), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := piecePool.Get().(*[]byte)
			defer piecePool.Put(buf)
			for {
				i := next.Add(1) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				off := i * pieceSize
				want := min(pieceSize, size-off)
				got, err := f.ReadAt((*buf)[:want], off)
				if int64(got) < want {
					if err == nil || errors.Is(err, io.EOF) {
						err = fmt.Errorf("file ended at %d, expected %d bytes (changed while reading?)", off+int64(got), size)
					}
					cancel(fmt.Errorf("reading %s at %d: %w", f.Name(), off, err))
					return
				}
				cvs[i] = b3.SubtreeCV((*buf)[:want], uint64(off/b3.ChunkLen))
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return Digest{}, err
	}
	return Digest{sum: b3.Tree(cvs)}, nil
}
