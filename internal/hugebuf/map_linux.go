//go:build linux

package hugebuf

import (
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on x86-64 and on arm64 with 4 KiB base pages.
const hugePage = 2 << 20

// limitMu serializes the memory limit's adjustments (read, then set).
var limitMu sync.Mutex

// mapBytes maps size bytes (rounded up to whole huge pages), advised MADV_HUGEPAGE (MADV_NOHUGEPAGE
// without huge), and lowers the process's memory limit by the mapping's size while it is held.
func mapBytes(size int, huge bool) ([]byte, func(), error) {
	length := (size + hugePage - 1) &^ (hugePage - 1)
	m, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("hugebuf: mapping %d bytes: %w", length, err)
	}
	advice := unix.MADV_HUGEPAGE
	if !huge {
		advice = unix.MADV_NOHUGEPAGE
	}
	_ = unix.Madvise(m, advice) // a hint: the mapping works either way
	unreserve := reserve(int64(length))
	var freed atomic.Bool
	return m[:size], func() {
		if freed.Swap(true) {
			return
		}
		if err := unix.Munmap(m); err != nil {
			panic(fmt.Sprintf("hugebuf: unmapping %d bytes: %v", length, err)) // the mapping is ours: a bug
		}
		unreserve()
	}, nil
}

// reserve lowers the memory limit by n (when one is set) until the returned function raises it again.
func reserve(n int64) func() {
	lowered := adjustLimit(-n)
	var done atomic.Bool
	return func() {
		if !done.Swap(true) && lowered {
			adjustLimit(n)
		}
	}
}

// adjustLimit moves the process's soft memory limit by delta bytes when a limit is set (it stays at
// least 1 byte), and reports whether it did.
func adjustLimit(delta int64) bool {
	limitMu.Lock()
	defer limitMu.Unlock()
	lim := debug.SetMemoryLimit(-1)
	if lim == math.MaxInt64 {
		return false
	}
	debug.SetMemoryLimit(max(1, lim+delta))
	return true
}
