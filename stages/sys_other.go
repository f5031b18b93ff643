//go:build !linux

package stages

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate does nothing where fallocate does not exist: a full disk fails the write itself.
func preallocate(f *os.File, n int64) error { return nil }

// madvPopulate is the nearest advice here: read the range ahead.
const madvPopulate = unix.MADV_WILLNEED
