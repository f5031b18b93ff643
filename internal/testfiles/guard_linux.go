package testfiles

import (
	"syscall"
	"testing"
	"unsafe"
)

// FloatsBeforeGuard returns n float32 values (n·4 bytes at most a page) that end where an inaccessible
// page begins, so that a kernel reading or writing one value past them faults; the mapping is
// removed when the test ends.
func FloatsBeforeGuard(tb testing.TB, n int) []float32 {
	tb.Helper()
	page := syscall.Getpagesize()
	if n < 0 || 4*n > page {
		tb.Fatalf("FloatsBeforeGuard(%d): want 0 to %d values", n, page/4)
	}
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[page:], syscall.PROT_NONE); err != nil {
		tb.Fatal(err)
	}
	all := unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), page/4)
	return all[len(all)-n:]
}
