package stages

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves n bytes of disk for f (fallocate), so that a full disk fails the write
// before any work is spent on it. A filesystem that cannot (EOPNOTSUPP) is no error.
func preallocate(f *os.File, n int64) error {
	if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	return nil
}

// madvPopulate is the advice that maps every page of a range at once (MADV_POPULATE_READ, Linux
// 5.14; only ever a hint).
const madvPopulate = unix.MADV_POPULATE_READ
