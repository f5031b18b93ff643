//go:build !linux

package artifacts

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What the store does on a system other than Linux (macOS is the one built and vetted, not run:
// `GOOS=darwin go vet ./...`), in place of sys_linux.go's calls. Each is a path the Linux build
// also takes when its filesystem refuses the call, so its results are the same bytes, only slower
// or using more disk:

// cloneFile reports that there is no reflink into an open file here (macOS's clonefile creates
// the destination itself): kernelCopy copies.
func cloneFile(dst, src *os.File) error { return unix.EOPNOTSUPP }

// copyRange reports that there is no in-kernel copy: kernelCopy copies each data segment in user
// space, writing zeros as holes.
func copyRange(src, dst *os.File, roff, woff *int64, n int) (int, error) { return 0, unix.ENOSYS }

// StartWriteback does nothing here: the fsync that makes the file durable writes everything.
func StartWriteback(f *os.File, off, n int64) {}

// punchHole reports that holes cannot be punched: digHoles leaves the file allocated, as on a
// Linux filesystem without PUNCH_HOLE.
func punchHole(f *os.File, off, n int64) error { return unix.EOPNOTSUPP }

// madvPopulate is the nearest advice here: read the range ahead.
const madvPopulate = unix.MADV_WILLNEED

// fileClock is the real-time clock file timestamps are taken from.
const fileClock = unix.CLOCK_REALTIME

// populate hints that m's pages will be read.
func populate(m []byte) { _ = unix.Madvise(m, madvPopulate) }

// dropPages unmaps the pages of m but keeps the mapping (MADV_DONTNEED).
func dropPages(m []byte) { _ = unix.Madvise(m, unix.MADV_DONTNEED) }

// unmap unmaps a mapping of mapReadOnly.
func unmap(m []byte) { _ = unix.MunmapPtr(unsafe.Pointer(&m[0]), uintptr(len(m))) }

// exchange reports that two names cannot be swapped atomically here: Materialize checks the
// destination again just before renaming over it, as on a Linux filesystem without
// RENAME_EXCHANGE.
func exchange(a, b string) error { return errNoExchange }
