//go:build unix

package testfiles

import (
	"syscall"
	"testing"
)

// Allocated is the disk space the file at path takes: its st_blocks, in bytes (512 each). A file
// with holes allocates less than its size.
func Allocated(tb testing.TB, path string) int64 {
	tb.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		tb.Fatal(err)
	}
	return st.Blocks * 512
}
