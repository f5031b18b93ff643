package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"orkpipe/artifacts"
	"orkpipe/registry/oci"
)

// A pull fetches each range of a file with one HTTP Range request on the file's blob and checks it
// in the same pass as it writes it: every byte received is decoded (tar+zstd), compared with the
// archive's expected header and trailer (tar forms) or hashed into the range's BLAKE3 pieces and
// written at its file offset (holes are hashed as zeros and left unwritten), while it is still in
// the CPU cache. A range counts as verified only when its bytes merge into its chaining value (or,
// for a one-range file, into the file's BLAKE3); the chaining values of a file's ranges merge into
// its BLAKE3 (ParseManifest checks that), so a file whose ranges all verified is the file push
// hashed, byte for byte, in place.

// fetchBuffer is the read size of a range download: each block is decoded, hashed and written
// while it is still in the CPU cache (a size chosen, not measured).
const fetchBuffer = 256 << 10

// writebackEvery is how many freshly written bytes of a range accumulate before their writeback is
// started (a hint; the fsync before the file's rename finds little left to do).
const writebackEvery = 32 << 20

// rangeHash hashes a range's file bytes in order: into BLAKE3 pieces from the range's offset, or,
// for a file of one piece or less (whose BLAKE3 is not merged from pieces), into a plain BLAKE3.
type rangeHash struct {
	ctx    context.Context // hashing a hole stops when it is done (a manifest may declare a terabyte of holes)
	pieces *artifacts.PieceHasher
	plain  hash.Hash
	pos    int64 // file offset of the next byte
	err    error // ctx's error, once a hole's hashing stopped for it
}

func newRangeHash(ctx context.Context, f File, r Range) (*rangeHash, error) {
	h := &rangeHash{ctx: ctx, pos: r.Off}
	if f.Digests.Size <= artifacts.PieceSize {
		h.plain = artifacts.NewHasher()
		return h, nil
	}
	var err error
	h.pieces, err = artifacts.NewPieceHasher(r.Off)
	return h, err
}

func (h *rangeHash) Write(p []byte) (int, error) {
	h.pos += int64(len(p))
	if h.plain != nil {
		return h.plain.Write(p)
	}
	return h.pieces.Write(p)
}

// zerosTo hashes zeros up to file offset off (a hole), checking the context every 64 MiB: once it is
// done, hashing stops and check returns its error.
func (h *rangeHash) zerosTo(off int64) {
	const step = 64 << 20
	for h.err == nil && h.pos < off {
		n := min(off-h.pos, step)
		if h.plain == nil {
			h.pieces.Zeros(n)
		} else {
			for k := n; k > 0; k -= min(k, fetchBuffer) {
				h.plain.Write(zeroBlock()[:min(k, fetchBuffer)])
			}
		}
		h.pos += n
		h.err = h.ctx.Err()
	}
}

// zeroBlock is fetchBuffer zero bytes (shared, never written), allocated on first use: at package
// init it was 256 KiB of every command's start-up heap, 30% of what all the binary's inits allocate
// (GODEBUG=inittrace=1; docs/performance-log.md, "Start-up and hashing, session 12").
var zeroBlock = sync.OnceValue(func() []byte { return make([]byte, fetchBuffer) })

// check compares the range's hash with the digest it must have (see rangeDigest).
func (h *rangeHash) check(f File, k int) error {
	if h.err != nil {
		return h.err
	}
	r := f.Ranges[k]
	if h.pos != r.Off+r.Len {
		return fmt.Errorf("%w: range %d hashed up to byte %d, it ends at %d", ErrDigestMismatch, k, h.pos, r.Off+r.Len)
	}
	switch {
	case h.plain != nil:
		if got := artifacts.DigestOf(h.plain); got != f.Digests.BLAKE3 {
			return fmt.Errorf("%w: the file's BLAKE3 is %s, the manifest says %s", ErrDigestMismatch, got, f.Digests.BLAKE3)
		}
	case f.RangeSize == 0:
		got, err := artifacts.RootDigest(h.pieces.Pieces())
		if err != nil {
			return err
		}
		if got != f.Digests.BLAKE3 {
			return fmt.Errorf("%w: the file's BLAKE3 is %s, the manifest says %s", ErrDigestMismatch, got, f.Digests.BLAKE3)
		}
	default:
		if got := artifacts.MergeCVs(h.pieces.Pieces()); got != r.CV {
			return fmt.Errorf("%w: range %d (bytes %d-%d) has BLAKE3 chaining value %s, the manifest says %s", ErrDigestMismatch, k, r.Off, r.Off+r.Len-1, cvHex(got), cvHex(r.CV))
		}
	}
	return nil
}

// step is one stretch of a range's decoded bytes: archive bytes that must equal want, or file
// bytes at off (written when write is set: outside holes).
type step struct {
	want  []byte
	off   int64
	n     int64
	write bool
}

// rangeSteps returns what range k's decoded bytes are, in order (segs: f's segments, for the tar
// forms).
func rangeSteps(f File, segs []segment, k int) []step {
	r := f.Ranges[k]
	var out []step
	if f.Form == FormRaw {
		pos := r.Off
		for _, e := range clip(f.Extents, r.Off, r.Len) {
			if e.Off > pos {
				out = append(out, step{off: pos, n: e.Off - pos})
			}
			out = append(out, step{off: e.Off, n: e.Len, write: true})
			pos = e.End()
		}
		if end := r.Off + r.Len; end > pos {
			out = append(out, step{off: pos, n: end - pos})
		}
		return out
	}
	seg := segs[k]
	if len(seg.head) > 0 {
		out = append(out, step{want: seg.head, n: int64(len(seg.head))})
	}
	for _, e := range seg.data {
		out = append(out, step{off: e.Off, n: e.Len, write: true})
	}
	if len(seg.tail) > 0 {
		out = append(out, step{want: seg.tail, n: int64(len(seg.tail))})
	}
	return out
}

// localWriteError is the partial file's own write failing (no space left, an I/O error): the pull's
// destination is at fault, not the bytes received, so it is reported as itself (the path is in it)
// and never retried as a corrupt download.
type localWriteError struct{ err error }

func (e localWriteError) Error() string { return e.err.Error() }
func (e localWriteError) Unwrap() error { return e.err }

// rangeSink receives a range's decoded bytes (an io.Writer): it checks archive bytes, writes file
// bytes at their offsets (pwrite) and hashes them, holes as zeros.
type rangeSink struct {
	f     *os.File
	steps []step
	i     int
	done  int64 // bytes of steps[i] consumed
	h     *rangeHash
	wbOff int64 // writeback not yet started for [wbOff, wbOff+wbLen)
	wbLen int64
}

func (s *rangeSink) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if s.i >= len(s.steps) {
			return n - len(p), fmt.Errorf("%w: more bytes than the range holds", ErrDigestMismatch)
		}
		st := &s.steps[s.i]
		k := min(int64(len(p)), st.n-s.done)
		b := p[:k]
		switch {
		case st.want != nil:
			if !bytes.Equal(b, st.want[s.done:s.done+k]) {
				return n - len(p), fmt.Errorf("%w: the archive's header or trailer differs from the one its name, size and extents give", ErrDigestMismatch)
			}
		default:
			s.h.zerosTo(st.off + s.done)
			s.h.Write(b)
			if st.write {
				if _, err := s.f.WriteAt(b, st.off+s.done); err != nil {
					return n - len(p), localWriteError{err}
				}
				s.written(st.off+s.done, k)
			}
		}
		s.done += k
		p = p[k:]
		if s.done == st.n {
			s.i++
			s.done = 0
		}
	}
	return n, nil
}

// written notes n bytes written at off and starts their writeback every writebackEvery bytes.
func (s *rangeSink) written(off, n int64) {
	if s.wbLen > 0 && s.wbOff+s.wbLen != off {
		s.flush()
	}
	if s.wbLen == 0 {
		s.wbOff = off
	}
	s.wbLen += n
	if s.wbLen >= writebackEvery {
		s.flush()
	}
}

// flush starts the writeback of the bytes noted (artifacts.StartWriteback, a hint: errors are ignored, the
// fsync before the rename reports any).
func (s *rangeSink) flush() {
	if s.wbLen > 0 {
		artifacts.StartWriteback(s.f, s.wbOff, s.wbLen)
		s.wbLen = 0
	}
}

// finish checks that every step was received, hashes the range's trailing hole and checks the hash.
func (s *rangeSink) finish(f File, k int) error {
	s.flush()
	if s.i != len(s.steps) {
		return fmt.Errorf("%w: the range ended %d bytes early", ErrDigestMismatch, stepsLen(s.steps[s.i:])-s.done)
	}
	r := f.Ranges[k]
	s.h.zerosTo(r.Off + r.Len)
	return s.h.check(f, k)
}

func stepsLen(steps []step) int64 {
	var n int64
	for _, s := range steps {
		n += s.n
	}
	return n
}

// fetchRange downloads, checks and writes range k of fj's file, retrying transient failures and
// corrupt transfers; the error names the file, the range and the layer.
func (fj *fileJob) fetchRange(ctx context.Context, r *oci.Repo, o *options, k int, downloaded *atomic.Int64) error {
	f := fj.file
	var err error
	for attempt := 1; attempt <= r.Retries(); attempt++ {
		if err = fj.fetchOnce(ctx, r, o, k, downloaded); err == nil {
			return nil
		}
		if !oci.Transient(err) || ctx.Err() != nil {
			break
		}
		r.Logger().Warn("retrying range download", "file", f.Name, "range", k, "layer", f.Layer.Digest.String(), "attempt", attempt, "err", err)
		oci.Backoff(ctx, attempt)
	}
	rg := f.Ranges[k]
	return fmt.Errorf("pull %s range %d/%d (bytes %d-%d of layer %s): %w", f.Name, k, len(f.Ranges), rg.Stored.Off, rg.Stored.End()-1, f.Layer.Digest, err)
}

// fetchOnce is one attempt at range k: one Range request, read once.
func (fj *fileJob) fetchOnce(ctx context.Context, r *oci.Repo, o *options, k int, downloaded *atomic.Int64) error {
	f, rg := fj.file, fj.file.Ranges[k]
	h, err := newRangeHash(ctx, f, rg)
	if err != nil {
		return err
	}
	sink := &rangeSink{f: fj.data, steps: rangeSteps(f, fj.segs, k), h: h}
	if rg.Stored.Len == 0 { // a range of holes only: nothing travels
		return sink.finish(f, k)
	}
	rc := r.OpenBlob(ctx, f.Layer, rg.Stored.Off, rg.Stored.Len)
	defer rc.Close()
	tr := &transferReader{r: rc, count: func(n int64) {
		downloaded.Add(n)
		o.progress.Report(Event{Kind: EventBytes, File: f.Name, Bytes: n})
	}}
	var data io.Reader = tr
	if f.Form == FormTarZstd {
		dec, err := newRangeDecoder(tr, stepsLen(sink.steps))
		if err != nil {
			return err
		}
		defer dec.Close()
		data = dec
	}
	want := stepsLen(sink.steps)
	_, copyErr := io.CopyBuffer(sink, io.LimitReader(data, want+1), make([]byte, fetchBuffer))
	if tr.err != nil { // the transfer itself failed (after the reader's own resumptions)
		return tr.err
	}
	if copyErr != nil {
		var we localWriteError
		if errors.As(copyErr, &we) || errors.Is(copyErr, ErrDigestMismatch) {
			return copyErr
		}
		if errors.Is(copyErr, zstd.ErrDecoderSizeExceeded) || errors.Is(copyErr, zstd.ErrWindowSizeExceeded) {
			return fmt.Errorf("%w: the range does not decode: its zstd frame header claims more memory than a frame of its %d bytes needs (%v)", ErrDigestMismatch, want, copyErr)
		}
		return fmt.Errorf("%w: the range does not decode: %v", ErrDigestMismatch, copyErr)
	}
	if rest, _ := io.Copy(io.Discard, tr); rest != 0 || tr.n != rg.Stored.Len {
		return fmt.Errorf("%w: the range's %d stored bytes hold %d bytes after its content", ErrDigestMismatch, tr.n, rest)
	}
	return sink.finish(f, k)
}

// encoderWindow is the largest window push's encoder (newEncoder: zstd's default level) writes in a
// frame header: its window, 8 MiB, for a frame it streams; a power of two no smaller than the
// frame for one it encodes whole.
const encoderWindow = 8 << 20

// newRangeDecoder returns a zstd decoder of a range whose frame decodes to want bytes. What the
// decoder may allocate for a frame is bounded whatever its header claims: a window of at most
// encoderWindow, and at most want rounded up to a power of two (or encoderWindow when larger) of
// content declared by a Single_Segment header (one declaring 512 MiB on a 4 KiB blob made the
// decoder allocate 512 MiB per range, out of memory with -j 8).
func newRangeDecoder(r io.Reader, want int64) (*zstd.Decoder, error) {
	lim := min(max(encoderWindow, uint64(1)<<bits.Len64(uint64(want))), 1<<41)
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(lim), zstd.WithDecoderMaxWindow(encoderWindow))
}

// verifyLocal re-hashes range k of the partial file (a resumed pull's journaled range) and reports
// whether its bytes are still the verified ones.
func (fj *fileJob) verifyLocal(ctx context.Context, k int) bool {
	f, rg := fj.file, fj.file.Ranges[k]
	h, err := newRangeHash(ctx, f, rg)
	if err != nil {
		return false
	}
	buf := make([]byte, fetchBuffer)
	for _, e := range clip(f.Extents, rg.Off, rg.Len) {
		h.zerosTo(e.Off)
		if _, err := io.CopyBuffer(h, oci.CtxReader{Ctx: ctx, R: io.NewSectionReader(fj.data, e.Off, e.Len)}, buf); err != nil {
			return false
		}
	}
	h.zerosTo(rg.Off + rg.Len)
	return h.check(f, k) == nil
}

// transferReader counts the bytes received and remembers the first transfer error, to tell a
// failed transfer from bad content.
type transferReader struct {
	r     io.Reader
	n     int64
	count func(int64)
	err   error
}

func (t *transferReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.n += int64(n)
	if n > 0 {
		t.count(int64(n))
	}
	if err != nil && err != io.EOF && t.err == nil {
		t.err = err
	}
	return n, err
}
