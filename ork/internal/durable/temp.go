package durable

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
)

// A writer that publishes dst by renaming a temp file writes that file in dst's directory as
// .<base of dst>.<16 hex>.tmp, holding an exclusive flock on it until the rename. It is created as
// .<base>.<16 hex>.new, locked, then renamed to .tmp, so a .tmp file is never unlocked while its
// writer lives. A process killed before the rename leaves its temp file (a stub's is gigabytes), and
// the lock dies with the process: the next CreateTemp for the same dst removes it.

// youngTemp: an unlocked .new file younger than this may be between its creation and its writer's
// lock, and is left alone.
const youngTemp = time.Minute

// CreateTemp creates dst's temp file (see above) and returns it open, locked for as long as f stays
// open, with its name (f.Name() is the .new name it was created under). The caller renames name to
// dst before closing f. It first removes dst's temp files whose writers are gone.
func CreateTemp(dst string) (f *os.File, name string, err error) {
	dir, base := filepath.Dir(dst), filepath.Base(dst)
	sweepTemps(dir, base)
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, "", err
	}
	stem := filepath.Join(dir, "."+base+"."+hex.EncodeToString(id[:]))
	f, err = os.OpenFile(stem+".new", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", err
	}
	// A sweeper may hold the lock for a moment (it then leaves a young .new alone).
	for tries := 0; ; tries++ {
		err = flock.Lock(f, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) || tries == 100 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if flock.Unsupported(err) {
		err = nil // a filesystem without flock (some NFS mounts): unlocked, and never swept either
	}
	if err == nil {
		err = os.Rename(stem+".new", stem+".tmp")
	}
	if err != nil {
		f.Close()
		os.Remove(stem + ".new")
		return nil, "", fmt.Errorf("temp file for %s: %w", dst, err)
	}
	return f, stem + ".tmp", nil
}

// sweepTemps removes the temp files of base in dir whose lock can be taken (their writers are gone);
// a .new file only once it is older than youngTemp. Best effort: what cannot be removed stays.
func sweepTemps(dir, base string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := "." + base + "."
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		id, young := strings.CutSuffix(rest, ".new")
		if !young {
			if id, ok = strings.CutSuffix(rest, ".tmp"); !ok {
				continue
			}
		}
		if !isHex16(id) {
			continue
		}
		removeUnlocked(filepath.Join(dir, name), young)
	}
}

// removeUnlocked removes p while holding its lock, if the lock can be taken and, for a young kind,
// the file is older than youngTemp.
func removeUnlocked(p string, young bool) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if flock.Lock(f, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || young && time.Since(st.ModTime()) < youngTemp {
		return
	}
	os.Remove(p)
}

func isHex16(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
