package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// holeSpan is the granularity at which ingest leaves all-zero ranges as file holes.
const holeSpan = 64 << 10

// writeSparse writes data at off in f, leaving holeSpan-aligned all-zero spans unwritten (holes).
// The caller truncates f to its final size afterwards so that trailing holes exist.
func writeSparse(f *os.File, off int64, data []byte) error {
	for len(data) > 0 {
		n := holeSpan - int(off%holeSpan)
		if n > len(data) {
			n = len(data)
		}
		piece := data[:n]
		if !(n == holeSpan && bytes.Equal(piece, zeros()[:n])) {
			if _, err := f.WriteAt(piece, off); err != nil {
				return fmt.Errorf("writing %s at %d: %w", f.Name(), off, err)
			}
		}
		off += int64(n)
		data = data[n:]
	}
	return nil
}

// Ingest stores everything read from r and returns its digest and size. The bytes go to a temp
// file in the store (holes where they are zero), are hashed while streaming, fsynced, size-checked
// and linked into place without overwriting an existing object. Concurrent ingests of the same
// bytes (goroutines or processes) all succeed and leave one object.
func (s *Store) Ingest(ctx context.Context, r io.Reader) (Object, error) {
	return s.ingestReader(ctx, r, nil)
}

// IngestExpect is Ingest for bytes whose digest and size are known in advance (a download): on a
// mismatch nothing is stored and the error wraps ErrCorrupt.
func (s *Store) IngestExpect(ctx context.Context, r io.Reader, want Object) (Object, error) {
	if want.Digest.IsZero() || want.Size < 0 {
		return Object{}, fmt.Errorf("ingest: expected object %v/%d is not valid", want.Digest, want.Size)
	}
	return s.ingestReader(ctx, r, &want)
}

func (s *Store) ingestReader(ctx context.Context, r io.Reader, want *Object) (Object, error) {
	if err := s.writable("ingest"); err != nil {
		return Object{}, err
	}
	f, err := os.CreateTemp(s.session.dir, "ingest-*")
	if err != nil {
		return Object{}, fmt.Errorf("ingest: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := NewStreamHasher()
	buf := blockPool.Get().(*[]byte)
	defer blockPool.Put(buf)
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return Object{}, err
		}
		n, rerr := io.ReadFull(r, *buf)
		if n > 0 {
			h.Write((*buf)[:n])
			if err := writeSparse(f, size, (*buf)[:n]); err != nil {
				return Object{}, fmt.Errorf("ingest: %w", err)
			}
			size += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return Object{}, fmt.Errorf("ingest: reading input after %d bytes: %w", size, rerr)
		}
	}
	obj := Object{Digest: DigestOf(h), Size: size}
	if want != nil && obj != *want {
		return Object{}, fmt.Errorf("ingest: %w: received %d bytes hashing to %s, expected %s (%d bytes)",
			ErrCorrupt, obj.Size, obj.Digest, want.Digest, want.Size)
	}
	return obj, s.commit(f, obj)
}

// IngestFile copies the regular file at path into the store. Only its data segments are copied
// (SEEK_DATA/SEEK_HOLE), so a sparse file stays sparse; the digest covers the logical bytes with
// holes as zeros. The copy is made by the kernel (reflink or copy_file_range) while the file is
// hashed on all CPUs (see copyAndHash): each byte is read once by the hash and once by the copy,
// written once, never copied through user space. The file must not change while it is copied:
// its size, mtime and ctime are compared before and after.
func (s *Store) IngestFile(ctx context.Context, path string) (Object, error) {
	if err := s.writable("ingest " + path); err != nil {
		return Object{}, err
	}
	src, err := os.Open(path)
	if err != nil {
		return Object{}, fmt.Errorf("ingest: %w", err)
	}
	defer src.Close()
	before, err := fstat(src)
	if err != nil {
		return Object{}, fmt.Errorf("ingest %s: %w", path, err)
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return Object{}, fmt.Errorf("ingest %s: not a regular file", path)
	}
	f, err := os.CreateTemp(s.session.dir, "ingest-*")
	if err != nil {
		return Object{}, fmt.Errorf("ingest: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	d, err := copyAndHash(ctx, src, f, before.Size)
	if err != nil {
		return Object{}, fmt.Errorf("ingest %s: %w", path, err)
	}
	if err := unchanged(src, before); err != nil {
		return Object{}, fmt.Errorf("ingest %s: %w", path, err)
	}
	obj := Object{Digest: d, Size: before.Size}
	return obj, s.commit(f, obj)
}

// AdoptFile moves a finished file from one of this Store's TempDirs into the store without
// copying it: its all-zero filesystem blocks become holes (digHoles: an output that came back
// fully allocated from another executor, e.g. a stub exported by a Dagger engine, is stored as
// sparse as one written locally), then it is hashed, fsynced, made 0444 and linked in; the temp
// path is then removed. A file outside the Store's TempDirs, or with other hard links, is refused;
// one this process may not write is adopted as it is.
func (s *Store) AdoptFile(ctx context.Context, path string) (Object, error) {
	return s.adopt(ctx, path, nil)
}

// AdoptHashed is AdoptFile for a file HashStamped hashed: when the stamp is sealed and the file,
// after its holes are dug, still has the identity it had while it was hashed (the same device and
// inode, size, mtime and ctime to the ns), its digest is taken from h and the file is not read
// again; otherwise it is hashed as AdoptFile hashes it. Either way the object is named by the
// digest of the bytes it holds: a file written, truncated or replaced after HashStamped has another
// identity (see HashedFile) and is hashed anew.
func (s *Store) AdoptHashed(ctx context.Context, path string, h HashedFile) (Object, error) {
	return s.adopt(ctx, path, &h)
}

// adopt is AdoptFile, with known (nil: none) the stamp of an earlier hash of the file.
func (s *Store) adopt(ctx context.Context, path string, known *HashedFile) (Object, error) {
	if err := s.writable("adopt " + path); err != nil {
		return Object{}, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return Object{}, fmt.Errorf("adopt %s: %w", path, err)
	}
	if !s.inSession(abs) {
		return Object{}, fmt.Errorf("adopt %s: not inside a TempDir of this store (%s)", abs, s.session.dir)
	}
	writable := true
	f, err := os.OpenFile(abs, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrPermission) {
		writable = false
		f, err = os.Open(abs)
	}
	if err != nil {
		return Object{}, fmt.Errorf("adopt: %w", err)
	}
	defer f.Close()
	before, err := fstat(f)
	if err != nil {
		return Object{}, fmt.Errorf("adopt %s: %w", abs, err)
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return Object{}, fmt.Errorf("adopt %s: not a regular file", abs)
	}
	if uint64(before.Nlink) != 1 {
		return Object{}, fmt.Errorf("adopt %s: file has %d hard links, want 1", abs, before.Nlink)
	}
	if writable {
		if _, err := digHoles(ctx, f, before.Size); err != nil {
			return Object{}, fmt.Errorf("adopt %s: %w", abs, err)
		}
		if before, err = fstat(f); err != nil { // punching holes changes mtime and ctime
			return Object{}, fmt.Errorf("adopt %s: %w", abs, err)
		}
	}
	var d Digest
	var sealed bool // every write after d was taken moves the file's mtime
	if known != nil && known.sealed && idOf(&before) == known.id {
		d, sealed = known.Digest, true
	} else {
		s.adoptHashes.add()
		sealed = pastTimes(&before, coarseNow())
		if d, err = hashOpenFile(ctx, f, before.Size); err != nil {
			return Object{}, fmt.Errorf("adopt %s: %w", abs, err)
		}
		if err := unchanged(f, before); err != nil {
			return Object{}, fmt.Errorf("adopt %s: %w", abs, err)
		}
	}
	obj := Object{Digest: d, Size: before.Size}
	if err := s.commit(f, obj); err != nil {
		return Object{}, err
	}
	if err := os.Remove(abs); err != nil {
		return Object{}, fmt.Errorf("adopt %s: removing temp name: %w", abs, err)
	}
	if sealed { // after the temp name's removal, which moves the ctime
		s.rememberVerified(f, d, &before)
	}
	return obj, nil
}

// commit makes the temp file f the object obj: truncate to size (trailing holes), fsync, check the
// size on disk, chmod 0444, link(2) to the final name (EEXIST: another writer won, keep theirs),
// fsync the directory. f's temp name is left for the caller to remove.
func (s *Store) commit(f *os.File, obj Object) error {
	final := s.objectPath(obj.Digest)
	if st, err := fstat(f); err != nil {
		return fmt.Errorf("ingest %s: %w", obj.Digest, err)
	} else if st.Size != obj.Size {
		if err := f.Truncate(obj.Size); err != nil {
			return fmt.Errorf("ingest %s: %w", obj.Digest, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("ingest %s: fsync %s: %w", obj.Digest, f.Name(), err)
	}
	st, err := fstat(f)
	if err != nil {
		return fmt.Errorf("ingest %s: %w", obj.Digest, err)
	}
	if st.Size != obj.Size {
		return fmt.Errorf("ingest %s: %w: temp file %s has %d bytes after fsync, wrote %d", obj.Digest, ErrCorrupt, f.Name(), st.Size, obj.Size)
	}
	if err := f.Chmod(0o444); err != nil {
		return fmt.Errorf("ingest %s: %w", obj.Digest, err)
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("ingest %s: %w", obj.Digest, err)
	}
	for attempt := 0; ; attempt++ {
		err = os.Link(f.Name(), final)
		if err == nil || !errors.Is(err, fs.ErrExist) {
			break
		}
		// Someone else stored it first. Keep theirs unless it is visibly broken.
		fi, serr := os.Lstat(final)
		if serr == nil && fi.Mode().IsRegular() && fi.Size() == obj.Size {
			err = nil
			break
		}
		if serr != nil && !errors.Is(serr, fs.ErrNotExist) || attempt > 0 {
			return fmt.Errorf("ingest %s: existing %s: %w", obj.Digest, final, errors.Join(err, serr))
		}
		if serr == nil {
			s.quarantine(obj.Digest, final, fmt.Sprintf("size %d, want %d", fi.Size(), obj.Size), nil)
		}
	}
	if err != nil {
		return fmt.Errorf("ingest %s: link into %s: %w", obj.Digest, final, err)
	}
	if err := SyncDir(filepath.Dir(final)); err != nil {
		return fmt.Errorf("ingest %s: %w", obj.Digest, err)
	}
	s.touch(obj.Digest)
	return nil
}

func fstat(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return st, fmt.Errorf("fstat %s: %w", f.Name(), err)
	}
	return st, nil
}

// unchanged fails if f's size, mtime or ctime differ from before (it was written meanwhile).
func unchanged(f *os.File, before unix.Stat_t) error {
	after, err := fstat(f)
	if err != nil {
		return err
	}
	if after.Size != before.Size || after.Mtim != before.Mtim || after.Ctim != before.Ctim {
		return fmt.Errorf("file changed while it was read (size %d -> %d)", before.Size, after.Size)
	}
	return nil
}
