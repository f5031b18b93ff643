//go:build darwin || freebsd

package registry

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames src to dst and fails if dst exists (a file that appeared meanwhile is
// never clobbered): link, which refuses an existing dst, and remove (the path Linux takes on a
// filesystem without RENAME_NOREPLACE).
func renameNoReplace(src, dst string) error { return linkAndRemove(src, dst) }

// stampOf is what sameFile compares of a file's status.
func stampOf(fi os.FileInfo) fileStamp {
	st := fi.Sys().(*syscall.Stat_t)
	return fileStamp{size: fi.Size(), dev: uint64(st.Dev), ino: st.Ino, mtime: st.Mtimespec.Nano(), ctime: st.Ctimespec.Nano()}
}

// punchHole is not done here (errors.ErrUnsupported): clearHoles then empties the file.
func punchHole(f *os.File, off, n int64) error { return errors.ErrUnsupported }

// freeBytes is the bytes available to an unprivileged user on the filesystem of dir: statfs(2)'s
// f_bavail, counted in f_bsize units (the fundamental block size on these systems).
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
