package durable

import (
	"os"

	"golang.org/x/sys/unix"
)

// StartWriteback asks the kernel to start writing f's bytes [off, off+n) to disk now, without
// waiting (sync_file_range SYNC_FILE_RANGE_WRITE; n 0: to the end of the file), so that the fsync
// that makes the file durable finds little left to write. It is only a hint and guarantees nothing:
// errors are ignored (the fsync reports any), and it never replaces that fsync.
func StartWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
