package artifacts

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Stat returns the object's size and records its use now (its access marker, for GC). It fails
// with ErrNotFound if the object is absent (never stored, collected or quarantined). It does not
// re-hash; Open and Verify do.
func (s *Store) Stat(ctx context.Context, d Digest) (Object, error) {
	obj, err := s.Present(ctx, d)
	if err == nil {
		s.touch(d)
	}
	return obj, err
}

// Present is Stat without recording the use: one lstat of the object file, which must be a regular
// file. A caller that checks many objects at once (the build memo) records their use with MarkUsed
// when it decides to.
func (s *Store) Present(ctx context.Context, d Digest) (Object, error) {
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	if d.IsZero() {
		return Object{}, fmt.Errorf("stat: %w: zero digest", ErrInvalidDigest)
	}
	p := s.objectPath(d)
	var st unix.Stat_t
	err := ignoringEINTR(func() error { return unix.Lstat(p, &st) })
	if errors.Is(err, unix.ENOENT) {
		return Object{}, fmt.Errorf("object %s: %w", d, ErrNotFound)
	}
	if err != nil {
		return Object{}, fmt.Errorf("object %s: lstat %s: %w", d, p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Object{}, fmt.Errorf("object %s: %s is not a regular file", d, p)
	}
	return Object{Digest: d, Size: st.Size}, nil
}

// MarkUsed records the use of every object in ds now, as Stat does for one (GC's least recently
// used order). Failures only cost GC accuracy.
func (s *Store) MarkUsed(ds []Digest) {
	for _, d := range ds {
		s.touch(d)
	}
}

// ignoringEINTR retries fn while it fails with EINTR (as package os does for its stats).
func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Path returns the path of the object's read-only file, for random access (pread, mmap). Reads
// through the path are not verified; call Verify first where that matters.
func (s *Store) Path(ctx context.Context, d Digest) (string, error) {
	if _, err := s.Stat(ctx, d); err != nil {
		return "", err
	}
	return s.objectPath(d), nil
}

// Open returns a reader of the object that hashes while streaming. At EOF it checks the size and
// digest; on a mismatch it quarantines the object and returns an error wrapping ErrCorrupt instead
// of io.EOF. A caller that stops before EOF gets no verification.
func (s *Store) Open(ctx context.Context, d Digest) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.IsZero() {
		return nil, fmt.Errorf("open: %w: zero digest", ErrInvalidDigest)
	}
	p := s.objectPath(d)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("object %s: %w", d, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", d, err)
	}
	st, err := fstat(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("object %s: %w", d, err)
	}
	s.touch(d)
	h := NewHasher()
	if st.Size > PieceSize {
		h = NewStreamHasher()
	}
	return &verifyingReader{s: s, ctx: ctx, f: f, d: d, ino: st.Ino, h: h}, nil
}

type verifyingReader struct {
	s    *Store
	ctx  context.Context
	f    *os.File
	d    Digest
	ino  uint64
	h    hash.Hash
	n    int64
	done error // sticky result once EOF was checked
}

func (r *verifyingReader) Read(p []byte) (int, error) {
	if r.done != nil {
		return 0, r.done
	}
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.f.Read(p)
	r.h.Write(p[:n])
	r.n += int64(n)
	if err == io.EOF {
		got := DigestOf(r.h)
		if got != r.d {
			r.done = r.s.corrupt(r.d, r.f, r.ino, fmt.Sprintf("%d bytes hash to %s", r.n, got))
		} else {
			r.done = io.EOF
		}
		return n, r.done
	}
	if err != nil {
		return n, fmt.Errorf("reading object %s: %w", r.d, err)
	}
	return n, nil
}

func (r *verifyingReader) Close() error { return r.f.Close() }

// Verify re-hashes the object. A mismatch quarantines it and returns an error wrapping
// ErrCorrupt; an absent object returns ErrNotFound. An object this Store adopted, whose file has
// kept the identity it had after the commit (see rememberVerified), is not read again: its bytes
// are the ones hashed under its name.
func (s *Store) Verify(ctx context.Context, d Digest) error {
	if d.IsZero() {
		return fmt.Errorf("verify: %w: zero digest", ErrInvalidDigest)
	}
	f, err := os.Open(s.objectPath(d))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("object %s: %w", d, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("object %s: %w", d, err)
	}
	defer f.Close()
	st, err := fstat(f)
	if err != nil {
		return fmt.Errorf("object %s: %w", d, err)
	}
	if id, ok := s.verified.Load(d); ok && id.(fileID) == idOf(&st) {
		return nil
	}
	s.verifyHashes.add()
	got, err := hashOpenFile(ctx, f, st.Size)
	if err != nil {
		return fmt.Errorf("verify object %s: %w", d, err)
	}
	if got != d {
		return s.corrupt(d, f, st.Ino, fmt.Sprintf("%d bytes hash to %s", st.Size, got))
	}
	return nil
}

// corrupt quarantines the object d if its file is still the inode that was read, and returns the
// ErrCorrupt error describing it.
func (s *Store) corrupt(d Digest, f *os.File, ino uint64, why string) error {
	p := s.objectPath(d)
	q := s.quarantine(d, p, why, &ino)
	if q == "" && s.readOnly {
		return fmt.Errorf("object %s at %s: %w: %s; not quarantined: the cache is opened read-only", d, p, ErrCorrupt, why)
	}
	if q == "" {
		return fmt.Errorf("object %s at %s: %w: %s", d, p, ErrCorrupt, why)
	}
	return fmt.Errorf("object %s at %s: %w: %s; moved to %s", d, p, ErrCorrupt, why, q)
}

// quarantine moves the object file p aside (only if it still is inode *ino, when given) and logs
// a warning. It returns the quarantine path, or "" if the file had already gone or the Store is
// read-only (then the object stays where it is, and the warning says so).
func (s *Store) quarantine(d Digest, p, why string, ino *uint64) string {
	if s.readOnly {
		s.log.Warn("corrupt object found; not quarantined: the cache is opened read-only", "digest", d.String(), "path", p, "reason", why)
		return ""
	}
	if ino != nil {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Ino != *ino {
			return "" // already quarantined, or replaced by a fresh good copy
		}
	}
	q := filepath.Join(s.dir, "quarantine", d.Hex()+"."+strconv.FormatInt(time.Now().UnixNano(), 10))
	if err := os.Rename(p, q); err != nil {
		s.log.Warn("corrupt object could not be quarantined", "digest", d.String(), "path", p, "reason", why, "err", err)
		return ""
	}
	SyncDir(filepath.Dir(p))
	os.Remove(s.accessPath(d))
	os.Remove(s.digestsPath(d))
	s.log.Warn("corrupt object quarantined", "digest", d.String(), "path", p, "reason", why, "quarantine", q)
	return q
}

// touch records d's use now (LRU for GC). Failures only cost GC accuracy.
func (s *Store) touch(d Digest) {
	if s.readOnly {
		return
	}
	p := s.accessPath(d)
	now := time.Now()
	if err := os.Chtimes(p, now, now); err == nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return
	}
	if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
		f.Close()
	}
}
