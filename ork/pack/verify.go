package pack

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"orkpipe/internal/blake3x"
	"orkpipe/ork/internal/parallel"
)

// verifyChunk is the most of an entry's data verification holds at once. A multiple of the page size, so
// that dataCheck sees every piece page-aligned.
const verifyChunk = 1 << 20

// VerifyEntry streams the named entry's bytes through BLAKE3 without holding them (verifyChunk at a time).
func (r *Reader) VerifyEntry(ctx context.Context, name string) error {
	e, err := r.Entry(name)
	if err != nil {
		return err
	}
	got, _, err := r.stream(ctx, e, make([]byte, min(verifyChunk, e.Length)), nil)
	if err != nil {
		return err
	}
	if got != e.Digest {
		return fmt.Errorf("pack %s: entry %q: %w: data hashes to %s, index says %s", r.name, name, ErrCorrupt, got, e.Digest)
	}
	return nil
}

// VerifyAll verifies every entry as decoding would, on GOMAXPROCS goroutines (VerifyEntries).
func (r *Reader) VerifyAll(ctx context.Context) error {
	return r.VerifyEntries(ctx, runtime.GOMAXPROCS(0))
}

// VerifyMemory is what one VerifyEntries worker holds at most: the largest entry's bytes, up to the
// verifyChunk (1 MiB) an entry streams through.
func (r *Reader) VerifyMemory() int64 {
	var m int64
	for _, e := range r.entries {
		m = max(m, e.Length)
	}
	return min(m, verifyChunk)
}

// VerifyEntries reads every entry and checks it against its BLAKE3 and for everything Load's decoding
// would reject (dataCheck: the codes' zero padding, as tile.Layout.CheckPadding checks it without
// untiling; every scale finite; the scales' page padding zero), on up to workers goroutines. Each worker
// streams an entry through one buffer of at most VerifyMemory bytes, reused from entry to entry, so memory
// does not grow with the entries' sizes. A pack that passes loads. It returns nil or the joined failures in
// index order, one per failing entry, each naming the entry; it stops early only when ctx is done.
func (r *Reader) VerifyEntries(ctx context.Context, workers int) error {
	return r.VerifyEntriesInto(ctx, make([][]byte, max(1, workers)))
}

// VerifyEntriesInto is VerifyEntries on len(bufs) workers (at least one), worker i streaming each entry
// through bufs[i] (its contents overwritten) when its capacity holds VerifyMemory bytes, and otherwise
// through a buffer of VerifyMemory bytes of its own, which then replaces bufs[i].
func (r *Reader) VerifyEntriesInto(ctx context.Context, bufs [][]byte) error {
	if len(bufs) == 0 {
		bufs = make([][]byte, 1)
	}
	need := r.VerifyMemory()
	for i, b := range bufs {
		if int64(cap(b)) < need {
			bufs[i] = make([]byte, need)
		}
	}
	errs := make([]error, len(r.entries))
	parallel.ForWorker(len(r.entries), len(bufs), func(w, i int) {
		if ctx.Err() == nil {
			errs[i] = r.verifyEntry(ctx, r.entries[i], bufs[w][:need])
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// verifyEntry streams e through buf (at least min(verifyChunk, e.Length) bytes, a multiple of PageSize),
// hashing it and checking it as decoding would (dataCheck). A digest mismatch is reported before what the
// check found: the bytes are not those the index describes.
func (r *Reader) verifyEntry(ctx context.Context, e Entry, buf []byte) error {
	c, err := newDataCheck(e)
	if err != nil {
		return fmt.Errorf("pack %s: %w", r.name, err)
	}
	got, cerr, err := r.stream(ctx, e, buf, c.check)
	if err != nil {
		return err
	}
	if got != e.Digest {
		return fmt.Errorf("pack %s: entry %q: %w: data at %d+%d hashes to %s, index says %s", r.name, e.Name, ErrCorrupt, e.Offset, e.Length, got, e.Digest)
	}
	if cerr != nil {
		return fmt.Errorf("pack %s: %w", r.name, cerr)
	}
	return nil
}

// stream reads e's data through buf, len(buf) bytes at a time (a multiple of PageSize unless it holds the
// whole entry), and returns its BLAKE3 and the first error check (when not nil) returned for a piece;
// after one, the other pieces are only hashed. err is a read error or ctx's.
func (r *Reader) stream(ctx context.Context, e Entry, buf []byte, check func(off int64, b []byte) error) (got Digest, cerr, err error) {
	if len(buf) == 0 || (int64(len(buf)) < e.Length && len(buf)%PageSize != 0) {
		return Digest{}, nil, fmt.Errorf("pack %s: entry %q: a read buffer of %d bytes: want a multiple of %d", r.name, e.Name, len(buf), PageSize)
	}
	h := blake3x.New()
	for off := int64(0); off < e.Length; {
		if err := ctx.Err(); err != nil {
			return Digest{}, nil, err
		}
		b := buf[:min(int64(len(buf)), e.Length-off)]
		if _, err := r.ra.ReadAt(b, e.Offset+off); err != nil {
			return Digest{}, nil, fmt.Errorf("pack %s: entry %q: reading %d bytes at %d: %w", r.name, e.Name, len(b), e.Offset+off, err)
		}
		h.Write(b)
		if check != nil && cerr == nil {
			cerr = check(off, b)
		}
		off += int64(len(b))
	}
	return Digest(h.Sum256()), cerr, nil
}
