package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// racyWindow: a file whose mtime or ctime is this close to the moment its hash was taken is hashed
// again next time rather than trusted, because a write in the same coarse kernel clock tick can
// leave both timestamps unchanged (git's "racy" entries).
var racyWindow = 100 * time.Millisecond

// fileID is what must stay identical for a cached digest of a path to be reused.
type fileID struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Size: st.Size, MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano()}
}

// statEntry is one stat-cache record, stat/<h0h1>/<blake3(path)>.json.
type statEntry struct {
	Path   string `json:"path"`
	ID     fileID `json:"id"`
	Digest Digest `json:"digest"`
}

// HashFile returns the digest and size of the regular file at path. A digest from the stat cache
// is reused only while the file's device, inode, size, mtime (ns) and ctime (ns) are all
// unchanged; ctime catches `rsync -a` and `touch -d`, which restore mtime. So is the digest of one
// of this Store's own object files that it adopted in this process, under the same rule
// (rememberVerified: the identity it had after the commit). Otherwise the file is
// hashed (read-ahead on a second goroutine, holes not read) and the entry rewritten atomically, so
// concurrent processes are safe. A file changing while it is hashed is an error.
func (s *Store) HashFile(ctx context.Context, path string) (Object, error) {
	abs, f, st, err := openUserFile(path)
	if err != nil {
		return Object{}, err
	}
	defer f.Close()
	id := idOf(&st)
	entryPath := s.keyPath("stat", abs)
	if e, ok := s.readStatEntry(entryPath, abs); ok && e.ID == id {
		return Object{Digest: e.Digest, Size: id.Size}, nil
	}
	if d, ok := s.adoptedObject(abs, id); ok {
		s.rememberStat(entryPath, abs, id, d)
		return Object{Digest: d, Size: id.Size}, nil
	}
	s.hashes.add()
	d, err := hashOpenFile(ctx, f, id.Size)
	if err != nil {
		return Object{}, fmt.Errorf("hash %s: %w", abs, err)
	}
	if err := unchanged(f, st); err != nil {
		return Object{}, fmt.Errorf("hash %s: %w", abs, err)
	}
	s.rememberStat(entryPath, abs, id, d)
	return Object{Digest: d, Size: id.Size}, nil
}

// rememberStat writes the stat-cache entry of abs (identity id, content d) at entryPath, unless
// the file is racy (then a stale entry is removed so that it cannot be matched later). Failing
// only costs a later re-hash.
func (s *Store) rememberStat(entryPath, abs string, id fileID, d Digest) {
	if s.readOnly {
		return
	}
	if racy(id, time.Now()) {
		os.Remove(entryPath)
		return
	}
	b, err := json.Marshal(statEntry{Path: abs, ID: id, Digest: d})
	if err == nil {
		err = s.writeRecord(entryPath, b)
	}
	if err != nil {
		s.log.Warn("stat cache not updated", "path", abs, "err", err)
	}
}

// openUserFile opens the regular file at path to hash it: its absolute path (the stat cache's key),
// the open file and its stat.
func openUserFile(path string) (string, *os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, st, fmt.Errorf("hash %s: %w", path, err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return "", nil, st, fmt.Errorf("hash: %w", err)
	}
	if st, err = fstat(f); err != nil {
		f.Close()
		return "", nil, st, fmt.Errorf("hash %s: %w", abs, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return "", nil, st, fmt.Errorf("hash %s: not a regular file", abs)
	}
	return abs, f, st, nil
}

func racy(id fileID, now time.Time) bool {
	limit := now.Add(-racyWindow).UnixNano()
	return id.MtimeNs >= limit || id.CtimeNs >= limit
}

// readStatEntry returns the cached entry of abs. A missing, unreadable or foreign entry is a miss.
func (s *Store) readStatEntry(entryPath, abs string) (statEntry, bool) {
	b, err := readLimited(entryPath, 1<<16)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("stat cache entry unreadable; re-hashing", "path", abs, "entry", entryPath, "err", err)
		}
		return statEntry{}, false
	}
	var e statEntry
	if err := json.Unmarshal(b, &e); err != nil || e.Path != abs || e.Digest.IsZero() {
		s.log.Warn("stat cache entry invalid; re-hashing", "path", abs, "entry", entryPath, "err", err)
		return statEntry{}, false
	}
	return e, true
}

// counter is a tiny atomic counter (test observability).
type counter struct{ n atomic.Int64 }

func (c *counter) add()        { c.n.Add(1) }
func (c *counter) load() int64 { return c.n.Load() }

// adoptedObject returns the digest of abs when abs is the object file of a digest this Store
// adopted and the file still has the identity remembered then (see rememberVerified).
func (s *Store) adoptedObject(abs string, id fileID) (Digest, bool) {
	d, err := ParseHex(filepath.Base(abs))
	if err != nil || s.objectPath(d) != abs {
		return Digest{}, false
	}
	v, ok := s.verified.Load(d)
	return d, ok && v.(fileID) == id
}
