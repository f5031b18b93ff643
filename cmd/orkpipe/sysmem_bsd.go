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
