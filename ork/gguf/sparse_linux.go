//go:build linux

package gguf

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// nextData returns the start of the first data (non-hole) byte at or after off, or -1 when
// the rest of the file is a hole. It costs no data I/O (SEEK_DATA).
func nextData(f *os.File, off int64) (int64, error) {
	n, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return -1, nil
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		return off, nil // filesystem without hole reporting: everything is data
	}
	return n, err
}

// nextHole returns the start of the first hole at or after off (the file size counts as one).
func nextHole(f *os.File, off int64) (int64, error) {
	n, err := unix.Seek(int(f.Fd()), off, unix.SEEK_HOLE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		st, serr := f.Stat()
		if serr != nil {
			return 0, serr
		}
		return st.Size(), nil
	}
	return n, err
}

// copyRange copies n bytes from src at srcOff to dst at dstOff, in the kernel when it can
// (copy_file_range), else by pread/pwrite.
func copyRange(dst, src *os.File, dstOff, srcOff, n int64, buf []byte) error {
	for n > 0 {
		c, err := unix.CopyFileRange(int(src.Fd()), &srcOff, int(dst.Fd()), &dstOff, int(min(n, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				return copyRangeRW(dst, src, dstOff, srcOff, n, buf)
			}
			return err
		}
		if c == 0 {
			return errors.New("copy_file_range: unexpected end of source")
		}
		n -= int64(c)
	}
	return nil
}

// renameNoReplace renames old to new, failing with os.ErrExist when new exists.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: os.ErrExist}
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		return linkNoReplace(oldpath, newpath)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}
