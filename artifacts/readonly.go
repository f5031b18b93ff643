package artifacts

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
)

// OpenStoreReadOnly opens the existing store at dir for reading only: a cache this process cannot
// write (a read-only mount, another user's cache shared with board hosts or CI). It creates,
// changes and removes nothing under dir: it checks LAYOUT, takes the shared lock on store.lock
// through a read-only descriptor (so GC, which needs the store to itself, still waits for it) and
// starts no temp session.
//
// Everything that only reads works as on a Store opened by OpenStore: Stat, Present, Path, Open,
// Verify, VerifyAll, GetAction, HashFile, Digests, FileDigests, InPlace, Usage. What they would
// have recorded on the way is not written: use times (GC's least recently used order), stat-cache
// entries and digests records (each is computed again next time), and a corrupt object or an
// invalid action record is reported (ErrCorrupt; a miss) but not moved to quarantine/. Every
// method that writes (Ingest, IngestExpect, IngestFile, AdoptFile, AdoptHashed, PutAction, Pin,
// LockKey, TempDir, Materialize, GC) fails with an error wrapping ErrReadOnly that names dir.
func OpenStoreReadOnly(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open store read-only: empty directory name")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s read-only: %w", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(abs, "LAYOUT"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open store %s read-only: no LAYOUT file: not an orkpipe cache (a read-only open creates none): %w", abs, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s read-only: %w", abs, err)
	}
	if string(b) != layoutText {
		return nil, fmt.Errorf("open store %s read-only: LAYOUT is %q, want %q (not an orkpipe cache, or another version)", abs, b, layoutText)
	}
	lf, err := os.OpenFile(filepath.Join(abs, "store.lock"), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open store %s read-only: %w", abs, err)
	}
	s := &Store{dir: abs, log: slog.Default(), readOnly: true}
	if err := s.lockShared(lf); err != nil {
		lf.Close()
		return nil, err
	}
	s.storeLock = lf
	return s, nil
}

// lockShared takes the shared lock on store.lock (open as lf), waiting, with a warning, while GC
// holds it exclusively.
func (s *Store) lockShared(lf *os.File) error {
	err := flock.Lock(lf, unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		// Only GC holds it exclusively, and for as long as it takes: say why nothing happens.
		s.log.Warn("waiting for the cache: another orkpipe process holds it exclusively (cache gc)", "dir", s.dir)
		err = flock.Lock(lf, unix.LOCK_SH)
	}
	if err != nil {
		return fmt.Errorf("open store %s: shared lock on store.lock: %w", s.dir, err)
	}
	return nil
}

// ReadOnly reports whether the Store was opened by OpenStoreReadOnly.
func (s *Store) ReadOnly() bool { return s.readOnly }

// writable returns nil on a Store opened for writing, else the ErrReadOnly error of op.
func (s *Store) writable(op string) error {
	if !s.readOnly {
		return nil
	}
	return fmt.Errorf("%s: %w: %s (nothing can be written to it by this command)", op, ErrReadOnly, s.dir)
}

// Writable returns nil when this process may write the store at dir as OpenStore needs to: dir
// itself (or, when it does not exist yet, its nearest existing parent, where OpenStore would create
// it), its store.lock and each of its subdirectories that exist. Otherwise it returns the error
// (EROFS, EACCES) naming the first path it may not write. It checks permissions only (access(2)),
// creating nothing: a command that only reads the cache opens it read-only where this fails.
func Writable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	p := abs
	for {
		_, err := os.Lstat(p)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(p) == p {
			return fmt.Errorf("cache %s: %w", abs, err)
		}
		p = filepath.Dir(p)
	}
	paths := []string{p}
	if p == abs {
		for _, name := range append([]string{"store.lock"}, storeDirs...) {
			if _, err := os.Lstat(filepath.Join(abs, name)); err == nil {
				paths = append(paths, filepath.Join(abs, name))
			}
		}
	}
	for _, p := range paths {
		if err := unix.Access(p, unix.W_OK); err != nil {
			return fmt.Errorf("cache %s: %s is not writable: %w", abs, p, err)
		}
	}
	return nil
}
