package artifacts

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls the store makes that are Linux's own; sys_other.go has what other systems get
// instead (each a documented fallback the Linux build also takes when its filesystem refuses).

// cloneFile makes dst share src's extents (FICLONE: btrfs, XFS). An error means no reflink here.
func cloneFile(dst, src *os.File) error {
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
}

// copyRange copies n bytes of src at *roff to dst at *woff in the kernel (copy_file_range(2)) and
// advances both offsets. EXDEV, ENOSYS, EOPNOTSUPP and EINVAL mean "not here": kernelCopy then
// copies in user space.
func copyRange(src, dst *os.File, roff, woff *int64, n int) (int, error) {
	return unix.CopyFileRange(int(src.Fd()), roff, int(dst.Fd()), woff, n, 0)
}

// StartWriteback asks the kernel to start writing f's bytes [off, off+n) to disk now, without
// waiting (sync_file_range SYNC_FILE_RANGE_WRITE; n 0: to the end of the file), so that the fsync
// that makes the file durable (AdoptFile's, an ingest's) finds little left to write. It is only a
// hint and guarantees nothing: errors are ignored (the fsync reports any), and it never replaces
// that fsync. (The ork packages, which may not import artifacts, have ork/internal/durable's.)
func StartWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// punchHole deallocates [off, off+n) of f and keeps its size (fallocate PUNCH_HOLE|KEEP_SIZE).
// EOPNOTSUPP or ENOSYS: the filesystem cannot.
func punchHole(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// madvPopulate is the advice that maps every page of a range at once (MADV_POPULATE_READ, Linux
// 5.14; older kernels refuse it, and it is only ever a hint).
const madvPopulate = unix.MADV_POPULATE_READ

// fileClock is the kernel's coarse real-time clock, the clock file timestamps are taken from.
const fileClock = unix.CLOCK_REALTIME_COARSE

// populate asks the kernel to map every page of m at once (MADV_POPULATE_READ). The slow system
// calls on the hash workers' mappings — populating, dropping pages, unmapping — are made without
// telling the Go scheduler (RawSyscall): a worker that entered a syscall state for each of them
// (~0.2-0.5 ms per 4 MiB) had the runtime hand its P over and wake threads every time
// (docs/performance-log.md, "Hashing, session 6"). They block nothing else: only the hash workers
// make them.
func populate(m []byte) {
	unix.RawSyscall(unix.SYS_MADVISE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), madvPopulate)
}

// dropPages unmaps the pages of m from the address space but keeps the mapping
// (MADV_DONTNEED): the file's pages stay in the page cache and a later touch maps them again.
func dropPages(m []byte) {
	unix.RawSyscall(unix.SYS_MADVISE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), unix.MADV_DONTNEED)
}

// unmap unmaps a mapping of mapReadOnly.
func unmap(m []byte) {
	unix.RawSyscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), 0)
}

// exchange swaps the files at paths a and b atomically (renameat2 RENAME_EXCHANGE, Linux 3.15):
// each name then holds the other's file, and neither is ever absent. A filesystem or kernel without
// it (EINVAL, ENOSYS, EOPNOTSUPP) reports errNoExchange.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return errNoExchange
	}
	return err
}
