package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"orkpipe/artifacts/internal/b3"
)

// pieceSize is the unit of parallel hashing: 4096 BLAKE3 chunks, a power of two, so that every
// full piece is a complete subtree of the file's BLAKE3 tree (see internal/b3).
const pieceSize = 4 << 20

var piecePool = sync.Pool{New: func() any { b := make([]byte, pieceSize); return &b }}

// pieceSlots bounds the pieces being hashed at once across all concurrent hashParallel calls (one
// per CPU), so that hashing many big files at once (VerifyAll, `orkpipe hash a b c`) neither
// oversubscribes the CPUs nor holds more than GOMAXPROCS piece buffers.
var pieceSlots = make(chan struct{}, runtime.GOMAXPROCS(0))

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
			for {
				i := next.Add(1) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				select {
				case pieceSlots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				buf := piecePool.Get().(*[]byte)
				err := hashPiece(f, size, i, *buf, &cvs[i])
				piecePool.Put(buf)
				<-pieceSlots
				if err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return Digest{}, err
	}
	return Digest{sum: b3.Tree(cvs)}, nil
}

// hashPiece reads piece i of f and stores its subtree chaining value in cv.
func hashPiece(f *os.File, size, i int64, buf []byte, cv *b3.CV) error {
	off := i * pieceSize
	want := min(pieceSize, size-off)
	got, err := f.ReadAt(buf[:want], off)
	if int64(got) < want {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("file ended at %d, expected %d bytes (changed while reading?)", off+int64(got), size)
		}
		return fmt.Errorf("reading %s at %d: %w", f.Name(), off, err)
	}
	*cv = b3.SubtreeCV(buf[:want], uint64(off/b3.ChunkLen))
	return nil
}
