package registry

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames src to dst and fails if dst exists (a file that appeared meanwhile is
// never clobbered): renameat2 RENAME_NOREPLACE, or, on a filesystem without it, link and remove.
func renameNoReplace(src, dst string) error {
	err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		err = linkAndRemove(src, dst)
	}
	return err
}

// stampOf is what sameFile compares of a file's status.
func stampOf(fi os.FileInfo) fileStamp {
	st := fi.Sys().(*syscall.Stat_t)
	return fileStamp{size: fi.Size(), dev: uint64(st.Dev), ino: st.Ino, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// punchHole deallocates [off, off+n) of f, keeping its size: those bytes then read as zeros.
func punchHole(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// freeBytes is the bytes available to an unprivileged user on the filesystem of dir: statfs(2)'s
// f_bavail, counted in f_frsize units (f_bsize where f_frsize is 0).
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	unit := st.Frsize
	if unit == 0 {
		unit = st.Bsize
	}
	return int64(st.Bavail) * unit, nil
}
