//go:build !linux

package durable

import "os"

// StartWriteback does nothing where sync_file_range does not exist: the fsync writes everything.
func StartWriteback(f *os.File, off, n int64) {}
