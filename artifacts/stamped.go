package artifacts

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A HashedFile is a file's digest together with the identity the file had while it was hashed
// (device, inode, size, mtime and ctime in ns), as HashStamped returns it. Store.AdoptHashed takes
// the digest instead of reading the file again only when the file still has that identity and the
// stamp is sealed: hashing began in a later tick of the kernel's coarse clock than the file's
// mtime and ctime, so any write after the hash began gave the file a later mtime and ctime (Linux
// stamps a change with the coarse clock, or a finer one, never an earlier time) and a changed file
// cannot keep the identity. A file whose timestamps have no sub-second part (a filesystem with
// whole-second times) is never sealed. The zero HashedFile is never sealed.
type HashedFile struct {
	Object
	id     fileID
	sealed bool
}

// Sealed reports whether the stamp lets Store.AdoptHashed skip the second hash (see HashedFile).
func (h HashedFile) Sealed() bool { return h.sealed }

// sealMin is the size from which HashStamped waits for the coarse clock to pass the file's
// timestamps (at most a tick, a few ms) so that the stamp is sealed: below it a second hash at
// adoption costs less than the wait.
const sealMin = PieceSize

// sealWait bounds that wait; a clock that does not pass the timestamps by then (a file stamped in
// the future) leaves the stamp unsealed.
const sealWait = 50 * time.Millisecond

// HashStamped returns the digest, size and identity of the regular file at path, hashed as
// HashPath hashes (no cache used or updated). A file that changes while it is hashed is an error.
// For a file of sealMin bytes or more it first waits until the coarse clock has passed the file's
// mtime and ctime, so that the stamp is sealed.
func HashStamped(ctx context.Context, path string) (HashedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return HashedFile{}, fmt.Errorf("hash: %w", err)
	}
	defer f.Close()
	st, err := fstat(f)
	if err != nil {
		return HashedFile{}, fmt.Errorf("hash %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return HashedFile{}, fmt.Errorf("hash %s: not a regular file", path)
	}
	sealed := false
	if st.Size >= sealMin {
		if sealed, err = waitPastTimes(ctx, &st); err != nil {
			return HashedFile{}, err
		}
	} else {
		sealed = pastTimes(&st, coarseNow())
	}
	d, err := hashOpenFile(ctx, f, st.Size)
	if err != nil {
		return HashedFile{}, fmt.Errorf("hash %s: %w", path, err)
	}
	if err := unchanged(f, st); err != nil {
		return HashedFile{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return HashedFile{Object: Object{Digest: d, Size: st.Size}, id: idOf(&st), sealed: sealed}, nil
}

// coarseNow is fileClock's time now (a clock as coarse as file timestamps, or finer: never behind them).
func coarseNow() unix.Timespec {
	var ts unix.Timespec
	if err := unix.ClockGettime(fileClock, &ts); err != nil {
		return unix.Timespec{} // no clock: nothing is past it, nothing sealed
	}
	return ts
}

// pastTimes reports whether now is later than st's mtime and ctime and both have a sub-second part.
func pastTimes(st *unix.Stat_t, now unix.Timespec) bool {
	if st.Mtim.Nsec == 0 || st.Ctim.Nsec == 0 {
		return false
	}
	n := now.Nano()
	return st.Mtim.Nano() < n && st.Ctim.Nano() < n
}

// waitPastTimes waits (at most sealWait) until the coarse clock is later than st's timestamps and
// reports whether it got there.
func waitPastTimes(ctx context.Context, st *unix.Stat_t) (bool, error) {
	deadline := time.Now().Add(sealWait)
	for !pastTimes(st, coarseNow()) {
		if st.Mtim.Nsec == 0 || st.Ctim.Nsec == 0 || time.Now().After(deadline) {
			return false, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		time.Sleep(time.Millisecond)
	}
	return true, nil
}

// rememberVerified lets Verify skip re-hashing the object d, just committed from the open file f,
// for as long as the object file keeps the identity f has now. It is called only when d was taken
// while the file's mtime was sealed (before: see HashedFile; every write after that moves the
// mtime), and it remembers only if f still has the device, inode, size and mtime it had then (no
// write since; the commit's chmod moved only the ctime). A later write, truncation or replacement
// changes the identity Verify compares, and Verify hashes. Within one process only: a Store opened
// later re-hashes.
func (s *Store) rememberVerified(f *os.File, d Digest, before *unix.Stat_t) {
	st, err := fstat(f)
	if err != nil || st.Dev != before.Dev || st.Ino != before.Ino || st.Size != before.Size || st.Mtim != before.Mtim {
		return
	}
	s.verified.Store(d, idOf(&st))
}
