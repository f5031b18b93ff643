package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
)

// MaterializeOptions tunes Materialize.
type MaterializeOptions struct {
	// Force replaces a destination orkpipe did not write, or that changed since it wrote it.
	Force bool
}

// MaterializeResult says what Materialize did.
type MaterializeResult struct {
	Path     string `json:"path"`
	Linked   bool   `json:"linked"`             // hard link to the object (else a sparse copy)
	Replaced string `json:"replaced,omitempty"` // what Force replaced; "" if nothing
}

// journalEntry records a file orkpipe wrote at a user path: journal/<h0h1>/<blake3(path)>.json.
type journalEntry struct {
	Path    string    `json:"path"`
	Digest  Digest    `json:"digest"`
	ID      fileID    `json:"id"`
	Written time.Time `json:"written"`
}

// Materialize puts object d at the user path dst, read-only (0444): a hard link when dst is on the
// store's filesystem, else a copy of the data segments only (sparse stays sparse). The write goes
// through a temp name in dst's directory and a rename, so dst is never half-written. A copy the
// journal records as d, unchanged since, is left as it is: a rebuild into a directory on another
// filesystem copies nothing.
//
// An existing dst is replaced only if nothing in it would be lost: the journal says orkpipe wrote
// it and it has not changed since (same (dev, inode, size, mtime, ctime), or, when only timestamps
// moved (hard links share the object's inode), the same content), or it already holds exactly the
// object's bytes (hashed when its size is the object's: a file another store, a copy or an older
// build put there). Anything else fails with ErrClobber naming dst, and the file is left untouched,
// unless opts.Force: then Replaced describes what was overwritten.
//
// What is checked is what is replaced: a file that reaches dst while Materialize writes (another
// build writing the same outputs, the user; a copy of many GiB takes a while) is judged by the same
// rules before anything happens to it (put): kept when it is the object or holds its bytes, else
// replaced only as above. The replacement itself swaps names in one step (renameat2
// RENAME_EXCHANGE) and checks the file it took out, putting back one that arrived in between; a
// filesystem without the swap gets a rename right after the last look. The journal records dst only
// while dst is still the file Materialize left there.
//
// A hard-linked destination shares the object's inode: it is read-only, and a user who makes it
// writable and edits it corrupts the object, which the next Open or Verify detects and quarantines.
func (s *Store) Materialize(ctx context.Context, d Digest, dst string, opts MaterializeOptions) (MaterializeResult, error) {
	abs, err := filepath.Abs(dst)
	if err != nil {
		return MaterializeResult{}, fmt.Errorf("materialize %s: %w", dst, err)
	}
	res := MaterializeResult{Path: abs}
	if err := s.writable("materialize " + abs); err != nil {
		return res, err
	}
	s.sweepTemps(filepath.Dir(abs))
	src := s.objectPath(d)
	obj, err := s.Stat(ctx, d)
	if err != nil {
		return res, fmt.Errorf("materialize %s: %w", abs, err)
	}
	var srcSt unix.Stat_t
	if err := unix.Stat(src, &srcSt); err != nil {
		return res, fmt.Errorf("materialize %s: object %s: %w", abs, d, err)
	}
	jpath := s.keyPath("journal", abs)
	var dstSt unix.Stat_t
	exists := true
	if err := unix.Lstat(abs, &dstSt); errors.Is(err, unix.ENOENT) {
		exists = false
	} else if err != nil {
		return res, fmt.Errorf("materialize %s: %w", abs, err)
	}
	var checked *unix.Stat_t // the file at abs that may be replaced
	if exists {
		if dstSt.Ino == srcSt.Ino && dstSt.Dev == srcSt.Dev {
			// Already this object, hard-linked. Writes through the link would have changed the
			// object itself: unless the journal matches exactly, re-hash (quarantines if so).
			res.Linked = true
			if e, ok := s.readJournal(jpath, abs); ok && e.Digest == d && e.ID == idOf(&dstSt) {
				return res, nil
			}
			if err := s.Verify(ctx, d); err != nil {
				return res, fmt.Errorf("materialize %s: %w", abs, err)
			}
			return res, s.writeJournal(jpath, abs, d, nil)
		}
		if e, ok := s.readJournal(jpath, abs); ok && e.Digest == d && e.ID == idOf(&dstSt) {
			return res, nil // the copy made earlier, unchanged since: nothing to copy again
		}
		_, why, err := s.clobberCheck(ctx, jpath, abs, abs, &dstSt, obj)
		if err != nil {
			return res, err
		}
		if why != "" {
			if !opts.Force {
				return res, fmt.Errorf("materialize %s: %w %s: %s", d, ErrClobber, abs, why)
			}
			res.Replaced = fmt.Sprintf("%s: %s", abs, why)
		}
		checked = &dstSt
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return res, fmt.Errorf("materialize %s: %w", abs, err)
	}
	tmp := filepath.Join(filepath.Dir(abs), tempPrefix+randomID()+tempSuffix)
	defer os.Remove(tmp)
	linked, hold, err := s.placeAt(ctx, d, src, tmp)
	if err != nil {
		return res, fmt.Errorf("materialize %s: %w", abs, err)
	}
	// hold's flock tells sweepTemps that tmp is live; it is released once tmp is renamed or removed.
	// (Its close cannot lose data: a copy was fsynced before placeAt returned.)
	defer hold.Close()
	res.Linked = linked
	p := &placing{d: d, obj: obj, abs: abs, tmp: tmp, jpath: jpath, src: srcSt, force: opts.Force, res: &res}
	if p.ours, err = fstat(hold); err != nil {
		return res, fmt.Errorf("materialize %s: %w", abs, err)
	}
	if s.beforeRename != nil {
		s.beforeRename(abs)
	}
	placed, err := s.put(ctx, p, checked)
	if err != nil {
		return res, fmt.Errorf("materialize %s: %w", abs, err)
	}
	// The temp name goes before the journal records abs's identity: unlinking it changes the
	// ctime of a hard-linked object, and the journal would never match again.
	os.Remove(tmp)
	if err := SyncDir(filepath.Dir(abs)); err != nil {
		return res, fmt.Errorf("materialize %s: %w", abs, err)
	}
	if res.Replaced != "" {
		s.log.Warn("materialize replaced a file", "path", abs, "replaced", res.Replaced, "digest", d.String())
	}
	return res, s.writeJournal(jpath, abs, d, &placed)
}

// InPlace reports whether materializing object d at dst would write no bytes: dst is a hard link to
// the object, or a copy the journal records as d whose (device, inode, size, mtime, ctime) have not
// changed since. It reads no file's content; any doubt is false.
func (s *Store) InPlace(ctx context.Context, d Digest, dst string) bool {
	abs, err := filepath.Abs(dst)
	if err != nil {
		return false
	}
	var dstSt, srcSt unix.Stat_t
	if unix.Lstat(abs, &dstSt) != nil {
		return false
	}
	if unix.Stat(s.objectPath(d), &srcSt) == nil && dstSt.Ino == srcSt.Ino && dstSt.Dev == srcSt.Dev {
		return true
	}
	e, ok := s.readJournal(s.keyPath("journal", abs), abs)
	return ok && e.Digest == d && e.ID == idOf(&dstSt)
}

// clobberCheck says whether the file st found at abs may be replaced by obj: same when it already
// holds obj's bytes; else why == "" when orkpipe wrote it and it has not changed since, and why
// not otherwise. path is where the file is read: abs, or the name swapIn moved it to.
func (s *Store) clobberCheck(ctx context.Context, jpath, abs, path string, st *unix.Stat_t, obj Object) (same bool, why string, err error) {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Sprintf("it exists and is not a regular file (mode %o)", st.Mode), nil
	}
	e, written := s.readJournal(jpath, abs)
	now := idOf(st)
	if written && now == e.ID {
		return e.Digest == obj.Digest, "", nil
	}
	// Compare content when it can decide: the file orkpipe wrote with only its timestamps or inode
	// moved (hard links to the object share its ctime), or a file that is already obj's bytes.
	if (written && now.Size == e.ID.Size && now.Dev == e.ID.Dev) || st.Size == obj.Size {
		got, err := HashPath(ctx, path)
		if err != nil {
			return false, "", fmt.Errorf("materialize: %w", err)
		}
		if got.Digest == obj.Digest {
			s.log.Debug("materialize: the existing file already holds the object's bytes", "path", abs, "digest", obj.Digest.String())
			return true, "", nil
		}
		if written && got.Digest == e.Digest {
			return false, "", nil
		}
	}
	if !written {
		return false, fmt.Sprintf("it exists (%d bytes) and orkpipe did not write it", st.Size), nil
	}
	return false, fmt.Sprintf("orkpipe wrote it as %s (%d bytes) at %s, but it changed since (now %d bytes, mtime %s)",
		e.Digest, e.ID.Size, e.Written.Format(time.RFC3339), now.Size, time.Unix(0, now.MtimeNs).Format(time.RFC3339Nano)), nil
}

// placeAt creates tmp as a hard link to the object, or, across filesystems, as a sparse 0444 copy
// made by the kernel while the object is hashed (copyAndHash) and checked against its name.
//
// A hard link is not re-hashed: the object was verified when it was stored, it is 0444 and never
// modified by orkpipe, and linking moves no bytes that could be damaged. What a link cannot rule out
// (a user who made the object writable and edited it, or bit rot) is what Verify, Open and the
// verify stage detect and quarantine; the copy path hashes anyway because it reads every byte.
//
// hold is an open file whose flock marks tmp as live for sweepTemps until the caller closes it: a
// shared lock on the object, taken before the link (so tmp, the same inode, is never seen unlocked),
// or an exclusive one on the copy.
func (s *Store) placeAt(ctx context.Context, d Digest, src, tmp string) (linked bool, hold *os.File, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, nil, err
	}
	defer func() {
		if hold != in {
			in.Close()
		}
	}()
	if !s.forceCopy {
		if err := flock.Wait(ctx, in, unix.LOCK_SH, 0, nil); err != nil {
			return false, nil, fmt.Errorf("lock %s: %w", src, err)
		}
		err := os.Link(src, tmp)
		if err == nil {
			return true, in, nil
		}
		if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EMLINK) {
			return false, nil, err
		}
		s.log.Debug("materialize: hard link impossible, copying", "digest", d.String(), "err", err)
	}
	st, err := fstat(in)
	if err != nil {
		return false, nil, err
	}
	// Created under the .new name, locked, then renamed: sweepTemps never sees tmp unlocked, and
	// leaves a young unlocked .new (between its creation and this lock) alone.
	pending := strings.TrimSuffix(tmp, tempSuffix) + newSuffix
	out, err := os.OpenFile(pending, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return false, nil, err
	}
	defer func() {
		if hold != out {
			out.Close()
			os.Remove(pending)
		}
	}()
	if err := flock.Wait(ctx, out, unix.LOCK_EX, 0, nil); flock.Unsupported(err) {
		// A filesystem without flock (some NFS mounts): the copy goes on unlocked, and sweepTemps,
		// whose flock fails the same way, never removes it.
		s.log.Debug("materialize: no lock on the temp copy", "path", pending, "err", err)
	} else if err != nil {
		return false, nil, fmt.Errorf("lock %s: %w", pending, err)
	}
	if err := os.Rename(pending, tmp); err != nil {
		return false, nil, err
	}
	got, err := copyAndHash(ctx, in, out, st.Size)
	if err != nil {
		return false, nil, err
	}
	if got != d {
		return false, nil, s.corrupt(d, in, st.Ino, fmt.Sprintf("%d bytes hash to %s while copying", st.Size, got))
	}
	if err := unchanged(in, st); err != nil {
		return false, nil, fmt.Errorf("object %s: %w", d, err)
	}
	if err := out.Truncate(st.Size); err != nil {
		return false, nil, err
	}
	if err := out.Chmod(0o444); err != nil {
		return false, nil, err
	}
	if err := out.Sync(); err != nil {
		return false, nil, err
	}
	return false, out, nil
}

// writeJournal records that abs holds d. placed, when given, is the file Materialize left at abs
// (its own, or one it kept): if abs is another file by now (not the object itself), a later writer
// replaced it, as a later build may, and nothing is recorded: the journal would vouch for bytes
// this Materialize never saw. (That writer records its own file, if it is orkpipe.)
func (s *Store) writeJournal(jpath, abs string, d Digest, placed *unix.Stat_t) error {
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); errors.Is(err, unix.ENOENT) && placed != nil {
		s.log.Debug("materialize: the file was removed before it was recorded", "path", abs, "digest", d.String())
		return nil
	} else if err != nil {
		return fmt.Errorf("materialize %s: journal: %w", abs, err)
	}
	if placed != nil && (st.Dev != placed.Dev || st.Ino != placed.Ino) && !s.isObjectFile(d, &st) {
		s.log.Debug("materialize: another writer replaced the file before it was recorded", "path", abs, "digest", d.String())
		return nil
	}
	b, err := json.Marshal(journalEntry{Path: abs, Digest: d, ID: idOf(&st), Written: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("materialize %s: journal: %w", abs, err)
	}
	if err := s.writeRecord(jpath, b); err != nil {
		return fmt.Errorf("materialize %s: journal: %w", abs, err)
	}
	return nil
}

// readJournal returns the journal entry of abs; absent or unreadable entries are reported as absent
// (logged), which makes the path count as not written by orkpipe: the safe side.
func (s *Store) readJournal(jpath, abs string) (journalEntry, bool) {
	b, err := readLimited(jpath, 1<<16)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("materialize journal entry unreadable", "path", abs, "entry", jpath, "err", err)
		}
		return journalEntry{}, false
	}
	var e journalEntry
	if err := json.Unmarshal(b, &e); err != nil || e.Path != abs || e.Digest.IsZero() {
		s.log.Warn("materialize journal entry invalid", "path", abs, "entry", jpath, "err", err)
		return journalEntry{}, false
	}
	return e, true
}
