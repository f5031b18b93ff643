package artifacts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
)

// session is a Store's private scratch area tmp/<id>/, alive while its flock on tmp/<id>.lock is
// held. The lock dies with the process (even on SIGKILL), which is how leftovers are recognised.
type session struct {
	dir  string
	lock *os.File
}

func newSession(tmpRoot string) (*session, error) {
	for attempt := 0; attempt < 10; attempt++ {
		id := randomID()
		// Create and lock under a name cleaners ignore, then rename into place: a cleaner can
		// never see an unlocked session lock of a live process.
		pending := filepath.Join(tmpRoot, ".new-"+id)
		f, err := os.OpenFile(pending, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("creating session lock: %w", err)
		}
		if err := flock.Lock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue // a cleaner got it between create and lock; it will delete it
		}
		lockPath := filepath.Join(tmpRoot, id+".lock")
		if err := os.Rename(pending, lockPath); err != nil {
			f.Close()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("creating session lock: %w", err)
		}
		dir := filepath.Join(tmpRoot, id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			f.Close()
			os.Remove(lockPath)
			return nil, fmt.Errorf("creating session dir: %w", err)
		}
		return &session{dir: dir, lock: f}, nil
	}
	return nil, errors.New("creating session: could not lock a fresh session file after 10 attempts")
}

func (ss *session) remove() error {
	err := os.RemoveAll(ss.dir)
	if rerr := os.Remove(strings.TrimSuffix(ss.dir, string(filepath.Separator)) + ".lock"); err == nil && rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = rerr
	}
	if cerr := ss.lock.Close(); err == nil {
		err = cerr
	}
	return err
}

// cleanSessions removes the session dirs of dead processes: those whose lock file can be locked,
// and dirs that have no lock file at all. Errors are logged, not returned: cleaning is best effort
// and never touches a live session.
func (s *Store) cleanSessions() (removed int) {
	root := filepath.Join(s.dir, "tmp")
	entries, err := os.ReadDir(root)
	if err != nil {
		s.log.Warn("cleaning temp sessions", "dir", root, "err", err)
		return 0
	}
	locks := map[string]bool{}
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".lock"); ok && !e.IsDir() {
			locks[id] = true
		}
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".lock") || strings.HasPrefix(name, ".new-"):
			p := filepath.Join(root, name)
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				continue
			}
			if flock.Lock(f, unix.LOCK_EX|unix.LOCK_NB) == nil {
				if id, ok := strings.CutSuffix(name, ".lock"); ok {
					if err := os.RemoveAll(filepath.Join(root, id)); err != nil {
						s.log.Warn("removing dead temp session", "dir", filepath.Join(root, id), "err", err)
						f.Close()
						continue
					}
				}
				os.Remove(p)
				removed++
			}
			f.Close()
		case e.IsDir() && !locks[name]:
			// A dir without a lock: a crash between removing the dir and its lock.
			if err := os.RemoveAll(filepath.Join(root, name)); err == nil {
				removed++
			}
		}
	}
	return removed
}

// TempDir returns a new empty scratch directory on the store's filesystem, for a node to write its
// outputs before AdoptFile moves them in without a copy. The caller removes it when done; if the
// process dies first, the next OpenStore or GC removes it.
func (s *Store) TempDir(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := s.writable("temp dir"); err != nil {
		return "", err
	}
	d, err := os.MkdirTemp(s.session.dir, "node-")
	if err != nil {
		return "", fmt.Errorf("temp dir in %s: %w", s.session.dir, err)
	}
	return d, nil
}

// inSession reports whether path lies inside this Store's session dir.
func (s *Store) inSession(path string) bool {
	if s.session == nil {
		return false
	}
	rel, err := filepath.Rel(s.session.dir, path)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

func randomID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on linux
	}
	return hex.EncodeToString(b[:])
}
