package sparse

import (
	"os"

	"golang.org/x/sys/unix"
)

// punchHole deallocates [off, off+n) of f and keeps its size.
func punchHole(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
