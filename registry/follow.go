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
)

// The whole-file check of a pull (see Verification) is one of:
//
//   - VerifiedBLAKE3 (every orkpipe push): a fileTree merges the BLAKE3 pieces each verified part
//     hashed from its own bytes in memory as they streamed (b3tree.go); nothing is read back but the
//     few pieces that straddle a part boundary.
//   - VerifiedSHA256 (a manifest without the BLAKE3 annotation): sha256 is serial, so a wholeFile
//     follower reads the partial file back in order, part by part as each is verified.
//   - VerifiedParts: nothing beyond the parts' own digests.

// startVerify starts the background work of fj's whole-file check: hashing the hole pieces
// (BLAKE3), or the follower (sha256), fed the parts resumed from an interrupted pull.
func (fj *fileJob) startVerify(ctx context.Context) {
	switch fj.result.Verified {
	case VerifiedBLAKE3:
		fj.tree.startHoles(ctx)
	case VerifiedSHA256:
		fj.whole = startWholeFile(ctx, fj.data, fj.file)
		for _, i := range fj.resumed {
			fj.whole.partReady(i)
		}
	}
}

// newPartTree returns the BLAKE3 piece hasher of one attempt at part index, or nil when fj is not
// verified by BLAKE3.
func (fj *fileJob) newPartTree(index int) *partTree {
	if fj.tree == nil {
		return nil
	}
	return fj.tree.newPart(index)
}

// partVerified hands the whole-file check a part whose bytes were verified and written: its BLAKE3
// pieces (pt, computed from those bytes), or its place in the follower's order.
func (fj *fileJob) partVerified(index int, pt *partTree) {
	if fj.tree != nil && pt != nil {
		fj.tree.commit(pt)
	}
	if fj.whole != nil {
		fj.whole.partReady(index)
	}
}

// wholeDigest returns the file's size and the digest its Verification names, once every part was
// verified.
func (fj *fileJob) wholeDigest(ctx context.Context) (FileDigests, error) {
	switch fj.result.Verified {
	case VerifiedBLAKE3:
		d, err := fj.tree.sum(ctx, fj.data)
		return FileDigests{Size: fj.file.Digests.Size, BLAKE3: d}, err
	case VerifiedSHA256:
		return fj.whole.wait(ctx)
	}
	return FileDigests{Size: fj.file.Digests.Size}, nil
}

// followBlock is the read size of the sha256 follower (from the page cache, right behind the part
// writers).
const followBlock = 1 << 20

// wholeFile computes the whole-file sha256 (holes as zeros) of a file being assembled from parts
// while the parts are still downloading, for a manifest without a BLAKE3 annotation. It runs on
// its own goroutine and reads the partial file in order, part by part, but only a part that has
// been verified (its bytes written and their sha256 checked against the manifest): a part is never
// hashed while a retry may still rewrite it. So when the last part lands, only that part is left
// to hash, instead of the whole file.
type wholeFile struct {
	f     *os.File
	file  File
	ready []chan struct{} // closed when part i is verified
	once  []sync.Once
	done  chan struct{} // closed when the hasher returned
	res   FileDigests   // Size and SHA256
	err   error
}

// startWholeFile starts the sha256 follower of f; it stops early when ctx is done.
func startWholeFile(ctx context.Context, f *os.File, file File) *wholeFile {
	w := &wholeFile{f: f, file: file, ready: make([]chan struct{}, len(file.Parts)), once: make([]sync.Once, len(file.Parts)), done: make(chan struct{})}
	for i := range w.ready {
		w.ready[i] = make(chan struct{})
	}
	go func() {
		defer close(w.done)
		h := sha256.New()
		n, err := w.follow(ctx, h)
		if err != nil {
			w.err = err
			return
		}
		w.res = FileDigests{Size: n, SHA256: "sha256:" + hex.EncodeToString(h.Sum(nil))}
	}()
	return w
}

// partReady marks part index as verified; its bytes may now be hashed. Idempotent.
func (w *wholeFile) partReady(index int) {
	w.once[index].Do(func() { close(w.ready[index]) })
}

// wait returns the file's size and sha256 once every part was marked ready and hashed.
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

// writebackEvery is how many freshly written bytes of a part download accumulate before their
// writeback is started (see writebackFunc).
const writebackEvery = 32 << 20

// writebackFunc returns a hint for extentWriter: start writing [off, off+n) of f to disk without
// waiting, so that the fsync before the file's rename finds little left to do. Errors are
// ignored: it is only a hint, and the fsync reports any failure.
func writebackFunc(f *os.File) func(off, n int64) {
	return func(off, n int64) {
		_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}

// startWriteback starts the writeback of every extent of a verified part (see writebackFunc).
func startWriteback(f *os.File, exts []Extent) {
	wb := writebackFunc(f)
	for _, e := range exts {
		wb(e.Off, e.Len)
	}
}
