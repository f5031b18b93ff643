package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestAvailBytes: f_bavail counts f_frsize units. build's space check multiplied it by f_bsize, the
// preferred I/O size, which filesystems such as FUSE and NFS set far above the fragment size: free
// space read 1024 times too large on a filesystem of 1 KiB fragments and 1 MiB I/O.
func TestAvailBytes(t *testing.T) {
	for _, c := range []struct {
		st   unix.Statfs_t
		want int64
	}{
		{unix.Statfs_t{Bavail: 1000, Bsize: 1 << 20, Frsize: 1 << 10}, 1000 << 10},
		{unix.Statfs_t{Bavail: 1000, Bsize: 4096, Frsize: 4096}, 1000 * 4096},
		{unix.Statfs_t{Bavail: 1000, Bsize: 4096}, 1000 * 4096}, // no f_frsize
	} {
		if got := availBytes(&c.st); got != c.want {
			t.Errorf("availBytes(bavail %d, bsize %d, frsize %d) = %d, want %d", c.st.Bavail, c.st.Bsize, c.st.Frsize, got, c.want)
		}
	}
}
