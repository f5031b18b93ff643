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

// wholeFile computes the one whole-file digest a pull checks (holes as zeros) of a file being
// assembled from parts while the parts are still downloading: BLAKE3 when the manifest records it,
// else sha256 when it records that, else none (see Verification). The hasher runs on its own
// goroutine and reads the partial file in order, part by part, but only a part that has been
// verified (its bytes written and their sha256 checked against the manifest): a part is never
// hashed while a retry may still rewrite it. So when the last part lands, only that part is left
// to hash, instead of the whole file. The sha256 of a file verified by BLAKE3 is not recomputed:
// every part already passed a sha256 check, and a BLAKE3 match proves the assembled bytes are the
// ones the pusher hashed for both annotations.
type wholeFile struct {
	f     *os.File
	file  File
	kind  Verification
	ready []chan struct{} // closed when part i is verified
	once  []sync.Once
	done  chan struct{} // closed when the hasher returned
	res   FileDigests   // Size and the digest named by kind
	err   error
}

// startWholeFile starts the hasher of fj's partial file; it stops early when ctx is done.
func startWholeFile(ctx context.Context, f *os.File, file File) *wholeFile {
	w := &wholeFile{f: f, file: file, kind: file.Digests.verification(), ready: make([]chan struct{}, len(file.Parts)), once: make([]sync.Once, len(file.Parts)), done: make(chan struct{})}
	for i := range w.ready {
		w.ready[i] = make(chan struct{})
	}
	if w.kind == VerifiedParts { // nothing to hash: the parts' own digests are the check
		w.res = FileDigests{Size: file.Digests.Size}
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		var h hash.Hash
		if w.kind == VerifiedBLAKE3 {
			h = artifacts.NewStreamHasher()
		} else {
			h = sha256.New()
		}
		n, err := w.follow(ctx, h)
		if err != nil {
			w.err = err
			return
		}
		w.res.Size = n
		if w.kind == VerifiedBLAKE3 {
			w.res.BLAKE3, w.err = artifacts.DigestFromBytes(h.Sum(nil))
		} else {
			w.res.SHA256 = "sha256:" + hex.EncodeToString(h.Sum(nil))
		}
	}()
	return w
}

// partReady marks part index as verified; its bytes may now be hashed. Idempotent.
func (w *wholeFile) partReady(index int) {
	w.once[index].Do(func() { close(w.ready[index]) })
}

// wait returns the file's size and the digest named by w.kind once every part was marked ready and
// hashed (at once for VerifiedParts).
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
