package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"orkpipe/artifacts"
)

// followBlock is the read size of the whole-file hashers (from the page cache, right behind the
// part writers).
const followBlock = 1 << 20

// wholeFile computes the whole-file digests (sha256 and BLAKE3, holes as zeros) of a file being
// assembled from parts while the parts are still downloading. Each hasher runs on its own
// goroutine and reads the partial file in order, part by part, but only a part that has been
// verified (its bytes written and their sha256 checked against the manifest): a part is never
// hashed while a retry may still rewrite it. So when the last part lands, only that part is left
// to hash, instead of the whole file, and sha256 and BLAKE3 run on different cores.
type wholeFile struct {
	f     *os.File
	file  File
	ready []chan struct{} // closed when part i is verified
	once  []sync.Once
	done  chan struct{} // closed when both hashers returned
	res   FileDigests
	err   error
}

// startWholeFile starts the two hashers of fj's partial file; they stop early when ctx is done.
func startWholeFile(ctx context.Context, f *os.File, file File) *wholeFile {
	w := &wholeFile{f: f, file: file, ready: make([]chan struct{}, len(file.Parts)), once: make([]sync.Once, len(file.Parts)), done: make(chan struct{})}
	for i := range w.ready {
		w.ready[i] = make(chan struct{})
	}
	var sha, b3 []byte
	var shaN, b3N int64
	var shaErr, b3Err error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		h := sha256.New()
		shaN, shaErr = w.follow(ctx, h)
		sha = h.Sum(nil)
	}()
	go func() {
		defer wg.Done()
		h := artifacts.NewStreamHasher()
		b3N, b3Err = w.follow(ctx, h)
		b3 = h.Sum(nil)
	}()
	go func() {
		wg.Wait()
		if w.err = shaErr; w.err == nil {
			w.err = b3Err
		}
		if w.err == nil && shaN != b3N {
			w.err = fmt.Errorf("internal: whole-file hashers read %d and %d bytes", shaN, b3N)
		}
		if w.err == nil {
			d, err := artifacts.DigestFromBytes(b3)
			w.res, w.err = FileDigests{Size: shaN, SHA256: "sha256:" + hex.EncodeToString(sha), BLAKE3: d}, err
		}
		close(w.done)
	}()
	return w
}

// partReady marks part index as verified; its bytes may now be hashed. Idempotent.
func (w *wholeFile) partReady(index int) {
	w.once[index].Do(func() { close(w.ready[index]) })
}

// wait returns the whole-file digests once every part was marked ready and hashed.
func (w *wholeFile) wait(ctx context.Context) (FileDigests, error) {
	select {
	case <-w.done:
		return w.res, w.err
	case <-ctx.Done():
		return FileDigests{}, ctx.Err()
	}
}

// follow feeds h the logical bytes of the file, part after part as they become ready, holes as
// zeros, and returns how many bytes it fed.
func (w *wholeFile) follow(ctx context.Context, h hash.Hash) (int64, error) {
	buf := make([]byte, followBlock)
	var pos int64
	zeros := func(n int64) {
		for n > 0 {
			k := min(n, int64(len(zeroBuf)))
			h.Write(zeroBuf[:k])
			n -= k
			pos += k
		}
	}
	for i, p := range w.file.Parts {
		select {
		case <-w.ready[i]:
		case <-ctx.Done():
			return pos, ctx.Err()
		}
		for _, e := range p.Extents {
			zeros(e.Off - pos)
			for off := e.Off; off < e.End(); {
				if err := ctx.Err(); err != nil {
					return pos, err
				}
				n := min(int64(len(buf)), e.End()-off)
				got, err := w.f.ReadAt(buf[:n], off)
				if int64(got) < n {
					if err == nil || err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return pos, fmt.Errorf("read %s at %d: %w", w.f.Name(), off, err)
				}
				h.Write(buf[:n])
				off += n
				pos += n
			}
		}
	}
	zeros(w.file.Digests.Size - pos)
	return pos, nil
}

// startWriteback asks the kernel to start writing the extents of a verified part to disk without
// waiting, so that the fsync before the file's rename finds little left to do. Errors are ignored:
// it is only a hint, and the fsync reports any failure.
func startWriteback(f *os.File, exts []Extent) {
	for _, e := range exts {
		_ = unix.SyncFileRange(int(f.Fd()), e.Off, e.Len, unix.SYNC_FILE_RANGE_WRITE)
	}
}
