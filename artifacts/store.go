package artifacts

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

const layoutText = "orkpipe-store 1\n"

// Object is a stored blob: its digest and its logical size in bytes.
type Object struct {
	Digest Digest `json:"digest"`
	Size   int64  `json:"size"`
}

// NamedObject is an object under a name, such as a node output ("pack", "stub").
type NamedObject struct {
	Name   string `json:"name"`
	Digest Digest `json:"digest"`
	Size   int64  `json:"size"`
}

// Store is an open cache directory. It is safe for concurrent use by goroutines, and several
// processes may open the same directory at once. Close releases its locks and its session dir.
type Store struct {
	dir     string
	log     *slog.Logger
	session *session // nil when readOnly
	// readOnly: opened by OpenStoreReadOnly; nothing is written under dir (see there).
	readOnly bool

	storeLock *os.File // flock LOCK_SH while open; LOCK_EX during GC

	// forceCopy makes Materialize copy instead of hardlinking (tests of the copy path).
	forceCopy bool
	// hashes counts full-content hashes done by HashFile and FileDigests (tests of the stat cache);
	// digestHashes those done by Digests (tests of the digests records).
	hashes, digestHashes counter
	// adoptHashes counts the hashes AdoptFile and AdoptHashed do (tests of AdoptHashed).
	adoptHashes counter
	// verified maps the digest of an object this Store adopted to its file's identity after the
	// commit (see rememberVerified); verifyHashes counts the hashes Verify does (tests).
	verified     sync.Map
	verifyHashes counter
	// beforeRename, if set, runs in Materialize between writing the temp file and putting it at
	// the destination (tests of a file that appears meanwhile).
	beforeRename func(dst string)
	// beforeSwap, if set, runs in swapIn just before it swaps its file with the destination (tests
	// of a file that arrives between the last look and the swap).
	beforeSwap func(dst string)
	// swept holds the directories whose dead Materialize temp files were removed (sweepTemps).
	swept sync.Map

	closeOnce sync.Once
	closeErr  error
}

var storeDirs = []string{"objects", "access", "digests", "quarantine", "actions", "pins", "stat", "journal", "locks", "tmp", "history", UploadsDir}

// UploadsDir is the store subdirectory owned by registry push: the sessions of its chunked uploads
// (registry/oci WithUploadState), so that a killed push resumes them.
const UploadsDir = "uploads"

// OpenStore opens the store at dir, creating the layout (see the package doc) if dir is empty or
// absent. It removes the temp sessions left by dead processes. A directory holding another
// layout is refused.
func OpenStore(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open store: empty directory name")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := checkLayout(abs); err != nil {
		return nil, err
	}
	for _, d := range storeDirs {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, fmt.Errorf("open store %s: %w", abs, err)
		}
	}
	s := &Store{dir: abs, log: slog.Default()}
	lf, err := os.OpenFile(filepath.Join(abs, "store.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := s.lockShared(lf); err != nil {
		lf.Close()
		return nil, err
	}
	s.storeLock = lf
	s.cleanSessions()
	if s.session, err = newSession(filepath.Join(abs, "tmp")); err != nil {
		lf.Close()
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	}
	return s, nil
}

// checkLayout writes the LAYOUT file of a new store or checks the one of an existing store.
func checkLayout(dir string) error {
	p := filepath.Join(dir, "LAYOUT")
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		if !bytes.Equal(b, []byte(layoutText)) {
			return fmt.Errorf("open store %s: LAYOUT is %q, want %q (not an orkpipe cache, or another version)", dir, b, layoutText)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("open store: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	for _, e := range entries {
		if e.Name() != "LAYOUT" && !strings.HasPrefix(e.Name(), ".rec-") && !isStoreEntry(e.Name()) {
			return fmt.Errorf("open store %s: directory is not empty and has no LAYOUT file (found %q); refusing to use it as a cache", dir, e.Name())
		}
	}
	if err := writeFileAtomic(dir, p, []byte(layoutText), 0o644); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	return nil
}

func isStoreEntry(name string) bool {
	if name == "store.lock" {
		return true
	}
	for _, d := range storeDirs {
		if d == name {
			return true
		}
	}
	return false
}

// Dir returns the absolute store directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the store lock and removes this Store's session dir (temp files and TempDirs).
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.session != nil {
			s.closeErr = s.session.remove()
		}
		if err := s.storeLock.Close(); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}

// fanPath returns <dir>/<kind>/<h0h1>/<hex><ext>.
func (s *Store) fanPath(kind, hex, ext string) string {
	return filepath.Join(s.dir, kind, hex[:2], hex+ext)
}

func (s *Store) objectPath(d Digest) string { return s.fanPath("objects", d.Hex(), "") }
func (s *Store) accessPath(d Digest) string { return s.fanPath("access", d.Hex(), "") }

// keyPath names a per-path record (stat cache, journal) by the BLAKE3 of the absolute path.
func (s *Store) keyPath(kind, absPath string) string {
	return s.fanPath(kind, SumBytes([]byte(absPath)).Hex(), ".json")
}

// writeFileAtomic writes b to path via a temp file in tmpDir (same filesystem), fsync and rename,
// then fsyncs the parent directory.
func writeFileAtomic(tmpDir, path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(tmpDir, ".rec-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// writeRecord writes a small record atomically using the session's temp dir.
func (s *Store) writeRecord(path string, b []byte) error {
	if err := s.writable("writing " + path); err != nil {
		return err
	}
	return writeFileAtomic(s.session.dir, path, b, 0o644)
}

// SyncDir fsyncs directory dir, so that a file created or renamed in it survives a crash. (The ork
// packages, which may not import artifacts, share their own: ork/internal/durable.)
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
