package pack

import (
	"context"
	"fmt"
	"io"
	"os"

	"orkpipe/internal/blake3x"
)

// Reader reads a validated orkpack. Open has already checked header, footer, index digest and every index
// record; entry bytes are checked against their BLAKE3 whenever they are read. Safe for concurrent use.
type Reader struct {
	ra      io.ReaderAt
	size    int64
	name    string
	closer  io.Closer
	t       trailer
	board   Board
	entries []Entry
	byName  map[string]int
	// residency is the index's residency plan, nil without one
	residency *Residency
}

// Open opens and validates the pack at path.
func Open(ctx context.Context, path string) (*Reader, error) {
	// Refused before the open, which for a named pipe would block until a writer comes.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("pack %s: %w: not a regular file", path, ErrCorrupt)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pack %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("pack %s: %w: not a regular file", path, ErrCorrupt)
	}
	r, err := NewReader(ctx, f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// NewReader validates the pack held by ra (size bytes); name is used in error messages.
func NewReader(ctx context.Context, ra io.ReaderAt, size int64, name string) (*Reader, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Reader, error) { return nil, fmt.Errorf("pack %s: %w", name, err) }
	if size < HeaderSize {
		if size >= 8 {
			var m [8]byte
			if _, err := ra.ReadAt(m[:], 0); err == nil && m != headerMagic {
				return fail(fmt.Errorf("%w: magic is %q, want %q", ErrNotPack, m[:], headerMagic[:]))
			}
		}
		return fail(fmt.Errorf("%w: file has %d bytes, less than the %d-byte header", ErrTruncated, size, HeaderSize))
	}
	hb := make([]byte, HeaderSize)
	if _, err := ra.ReadAt(hb, 0); err != nil {
		return fail(fmt.Errorf("reading the header: %w", err))
	}
	t, err := decodeHeader(hb)
	if err != nil {
		return fail(err)
	}
	switch {
	case size < t.total:
		return fail(fmt.Errorf("%w: expected %d bytes, file has %d", ErrTruncated, t.total, size))
	case size > t.total:
		return fail(fmt.Errorf("%w: expected %d bytes, file has %d (%d bytes appended)", ErrTrailing, t.total, size, size-t.total))
	}
	fb := make([]byte, FooterSize)
	if _, err := ra.ReadAt(fb, size-FooterSize); err != nil {
		return fail(fmt.Errorf("reading the footer: %w", err))
	}
	ft, err := decodeFooter(fb)
	if err != nil {
		return fail(err)
	}
	if ft != t {
		return fail(fmt.Errorf("%w: footer disagrees with header (footer: index %d+%d total %d count %d version %d; header: index %d+%d total %d count %d version %d)",
			ErrCorrupt, ft.indexOffset, ft.indexLength, ft.total, ft.count, ft.version, t.indexOffset, t.indexLength, t.total, t.count, t.version))
	}
	ib := make([]byte, t.indexLength)
	if _, err := ra.ReadAt(ib, t.indexOffset); err != nil {
		return fail(fmt.Errorf("reading the index: %w", err))
	}
	if got := Digest(blake3x.Sum256(ib)); got != t.indexDigest {
		return fail(fmt.Errorf("%w: index digest mismatch: header and footer say %s, index bytes hash to %s", ErrCorrupt, t.indexDigest, got))
	}
	board, entries, res, err := decodeIndex(ib, t.count, t.indexOffset, t.version)
	if err != nil {
		return fail(err)
	}
	r := &Reader{ra: ra, size: size, name: name, t: t, board: board, entries: entries, residency: res, byName: make(map[string]int, len(entries))}
	for i, e := range entries {
		r.byName[e.Name] = i
	}
	return r, nil
}

// Close closes the file opened by Open.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

// Version returns the pack's format version.
func (r *Reader) Version() uint32 { return r.t.version }

// Size returns the pack's length in bytes.
func (r *Reader) Size() int64 { return r.size }

// IndexDigest returns the BLAKE3 of the index.
func (r *Reader) IndexDigest() Digest { return r.t.indexDigest }

// Board returns the plan summary stored in the index.
func (r *Reader) Board() Board { return r.board }

// Entries returns the index records in index (execution) order.
func (r *Reader) Entries() []Entry { return append([]Entry(nil), r.entries...) }

// Entry returns the record of the named entry.
func (r *Reader) Entry(name string) (Entry, error) {
	i, ok := r.byName[name]
	if !ok {
		return Entry{}, fmt.Errorf("pack %s: %w: %q", r.name, ErrNotFound, name)
	}
	return r.entries[i], nil
}

// ReadEntry returns the named entry's data (codes then padded scales), verified against its BLAKE3. It
// allocates the entry's Length bytes, which the index alone bounds (up to about 2^49 for a 2^24 x 2^24
// F16 entry): a caller holding an entry checks its size first; VerifyEntry and VerifyEntries stream.
func (r *Reader) ReadEntry(ctx context.Context, name string) (Entry, []byte, error) {
	e, err := r.Entry(name)
	if err != nil {
		return Entry{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return Entry{}, nil, err
	}
	b := make([]byte, e.Length)
	if _, err := r.ra.ReadAt(b, e.Offset); err != nil {
		return Entry{}, nil, fmt.Errorf("pack %s: entry %q: %w", r.name, name, err)
	}
	if got := Digest(blake3x.Sum256(b)); got != e.Digest {
		return Entry{}, nil, fmt.Errorf("pack %s: entry %q: %w: data at %d+%d hashes to %s, index says %s", r.name, name, ErrCorrupt, e.Offset, e.Length, got, e.Digest)
	}
	return e, b, nil
}

// Load reads, verifies and decodes the named entry back to codes and scales through the untiler. It holds
// the entry's data (ReadEntry) and its K·N decoded codes.
func (r *Reader) Load(ctx context.Context, name string) (Weight, error) {
	e, b, err := r.ReadEntry(ctx, name)
	if err != nil {
		return Weight{}, err
	}
	w, err := Decode(e, b)
	if err != nil {
		return Weight{}, fmt.Errorf("pack %s: %w", r.name, err)
	}
	return w, nil
}

// Residency returns the pack's residency plan (docs/orkpack.md 3.1); ok is false for a pack without one
// (every pack before version 3): the board loads every entry at start.
func (r *Reader) Residency() (res Residency, ok bool) {
	if r.residency == nil {
		return Residency{}, false
	}
	c := *r.residency
	c.Experts = make([]ResidentExpert, len(r.residency.Experts))
	for i, x := range r.residency.Experts {
		x.Entries = append([]string(nil), x.Entries...)
		c.Experts[i] = x
	}
	return c, true
}
