package main

import "golang.org/x/sys/unix"

// physicalMemory returns the machine's physical memory in bytes.
func physicalMemory() (int64, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, err
	}
	return int64(si.Totalram) * int64(si.Unit), nil
}

// availBytes is the bytes statfs(2) says an unprivileged user may still write: f_bavail counts
// fragments of f_frsize bytes (f_bsize is the preferred I/O size, which some filesystems, FUSE and
// NFS among them, set far larger), f_bsize only where f_frsize is 0.
func availBytes(st *unix.Statfs_t) int64 {
	unit := st.Frsize
	if unit == 0 {
		unit = st.Bsize
	}
	return int64(st.Bavail) * unit
}
