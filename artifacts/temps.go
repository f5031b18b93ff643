package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
)

// Materialize writes through a temp file in the destination's directory (the user's, outside the
// store): .orkpipe-<16 hex>.tmp, flocked for as long as its writer lives (placeAt). A process killed
// before the rename leaves it behind, and on another filesystem it is a whole copy of the object. A
// copy is created as .orkpipe-<16 hex>.new, locked, then renamed to .tmp, so that a .tmp file is
// never unlocked while its writer lives (the way newSession creates a session's lock).
//
// Replacing a file, Materialize also gives its file the name .orkpipe-<16 hex>.old, which it swaps
// with the destination (swapIn): the file taken out then has that name until Materialize has
// checked and removed it, or put it back. It is never swept: only a process killed in that instant
// leaves one, holding the destination's previous file, which may be the user's.
const (
	tempPrefix = ".orkpipe-"
	tempSuffix = ".tmp"
	newSuffix  = ".new"
	oldSuffix  = ".old"
	// liveTempAge: an unlocked .new file younger than this may be a copy between its creation and
	// its writer's lock, and is left alone. The records written outside a session (pruneStaleTemps)
	// take the same age.
	liveTempAge = time.Minute
)

// tempName returns the kind of a Materialize temp file name: tempSuffix, newSuffix or "" for any
// other name (a file of the user's, or another writer's temp file).
func tempName(name string) string {
	for _, suffix := range []string{tempSuffix, newSuffix} {
		id, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if id, ok = strings.CutPrefix(id, tempPrefix); !ok || len(id) != 16 {
			return ""
		}
		for _, c := range id {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return ""
			}
		}
		return suffix
	}
	return ""
}

// sweepTemps removes the temp files that killed Materialize calls left in dir, once per directory
// for the life of the Store. A temp file is dead when its flock can be taken: no writer holds it,
// and the lock dies with its process. A .new file must also be older than liveTempAge. Best
// effort: failures are logged at debug level and change nothing.
func (s *Store) sweepTemps(dir string) {
	if _, done := s.swept.LoadOrStore(dir, true); done {
		return
	}
	sweepDir(dir, s.log)
}

// sweepDir removes the dead temp files in dir (see sweepTemps), logging to log.
func sweepDir(dir string, log *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // not created yet, or unreadable: Materialize reports what matters
	}
	for _, e := range entries {
		kind := tempName(e.Name())
		if !e.Type().IsRegular() || kind == "" {
			continue
		}
		p := filepath.Join(dir, e.Name())
		removed, err := removeDeadTemp(p, kind == newSuffix)
		switch {
		case err != nil:
			log.Debug("leaving a temp file", "path", p, "err", err)
		case removed:
			log.Info("removed a temp file a killed orkpipe left", "path", p)
		}
	}
}

// removeDeadTemp removes the temp file p if no writer holds its lock (see sweepTemps) and, when
// young is set, it is older than liveTempAge. It holds the lock while it removes the file.
func removeDeadTemp(p string, young bool) (bool, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := flock.Lock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // live
	}
	st, err := fstat(f)
	if err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, nil
	}
	if young && time.Since(time.Unix(st.Mtim.Unix())) < liveTempAge {
		return false, nil
	}
	if err := os.Remove(p); err != nil {
		return false, err
	}
	return true, nil
}

// CreateTemp creates the temp file of a writer that publishes dst by renaming (or linking) a file
// into place — a page, a report, a record beside a build's outputs —, in dst's directory and named,
// created and locked as Materialize's own: .orkpipe-<16 hex>.tmp, created as .new, locked, then
// renamed. f is open for writing and holds the lock until it is closed; name is the .tmp name. The
// caller renames or links name to dst, or removes it, before it closes f. CreateTemp first removes
// the temp files that killed writers left in that directory (as Materialize does: those whose lock
// can be taken), so a writer killed before its rename leaves its file only until the next
// CreateTemp or Materialize there. (The ork packages, which may not import artifacts, have
// ork/internal/durable's.)
func CreateTemp(dst string) (f *os.File, name string, err error) {
	dir := filepath.Dir(dst)
	sweepDir(dir, slog.Default())
	name = filepath.Join(dir, tempPrefix+randomID()+tempSuffix)
	pending := strings.TrimSuffix(name, tempSuffix) + newSuffix
	f, err = os.OpenFile(pending, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("temp file for %s: %w", dst, err)
	}
	// A sweeper holds the lock of a .new file only for a moment (and leaves a young one alone).
	err = flock.Wait(context.Background(), f, unix.LOCK_EX, 0, nil)
	if flock.Unsupported(err) {
		err = nil // a filesystem without flock: unlocked, and never swept either
	}
	if err == nil {
		err = os.Rename(pending, name)
	}
	if err != nil {
		f.Close()
		os.Remove(pending)
		return nil, "", fmt.Errorf("temp file for %s: %w", dst, err)
	}
	return f, name, nil
}

// pruneLocks removes the per-key lock files (locks/). Only GC calls it, holding the store lock
// exclusively: every LockKey caller has a Store open, so no process holds or waits on a key lock.
func (s *Store) pruneLocks(ctx context.Context) (int, error) {
	root := filepath.Join(s.dir, "locks")
	fans, err := os.ReadDir(root)
	if err != nil {
		return 0, fmt.Errorf("pruning key locks: %w", err)
	}
	n := 0
	for _, fan := range fans {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		dir := filepath.Join(root, fan.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			return n, fmt.Errorf("pruning key locks: %w", err)
		}
		for _, f := range files {
			if !strings.HasSuffix(f.Name(), ".lock") || !f.Type().IsRegular() {
				continue
			}
			if err := os.Remove(filepath.Join(dir, f.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return n, fmt.Errorf("pruning key locks: %w", err)
			}
			n++
		}
	}
	return n, nil
}

// pruneStaleTemps removes the temp files that killed writers left outside the sessions: the store's
// own records written before a session exists (.rec-* beside LAYOUT) and the engine's files under
// history/ (.orkpipe-*.tmp, and .tmp-* of older versions). Some of those writers run without the
// store lock (a build keeps its costs after closing its Store), so a file is removed only when it
// is older than liveTempAge: each is a few KiB written in one go.
func (s *Store) pruneStaleTemps(ctx context.Context) (int, error) {
	n := 0
	remove := func(p string, d fs.DirEntry) error {
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		if !info.Mode().IsRegular() || time.Since(info.ModTime()) < liveTempAge {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing a stale temp file: %w", err)
		}
		n++
		return nil
	}
	top, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("pruning temp files: %w", err)
	}
	for _, e := range top {
		if strings.HasPrefix(e.Name(), ".rec-") {
			if err := remove(filepath.Join(s.dir, e.Name()), e); err != nil {
				return n, err
			}
		}
	}
	err = filepath.WalkDir(filepath.Join(s.dir, "history"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() || !(strings.HasPrefix(name, ".orkpipe-") && strings.HasSuffix(name, ".tmp") || strings.HasPrefix(name, ".tmp-")) {
			return nil
		}
		return remove(p, d)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, fmt.Errorf("pruning temp files: %w", err)
	}
	return n, nil
}
