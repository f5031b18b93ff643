//go:build darwin || freebsd

package main

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// physicalMemory returns the machine's physical memory in bytes (sysctl hw.memsize on macOS,
// hw.physmem on FreeBSD).
func physicalMemory() (int64, error) {
	name := "hw.memsize"
	if runtime.GOOS == "freebsd" {
		name = "hw.physmem"
	}
	n, err := unix.SysctlUint64(name)
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %w", name, err)
	}
	return int64(n), nil
}

// availBytes is the bytes statfs(2) says an unprivileged user may still write: f_bavail counts
// blocks of f_bsize bytes (the fundamental block size on darwin and freebsd).
func availBytes(st *unix.Statfs_t) int64 { return int64(st.Bavail) * int64(st.Bsize) }
