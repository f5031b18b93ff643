// Package hugebuf makes large scratch buffers outside the Go heap, in anonymous mappings advised for
// transparent huge pages (Make), or against them for a buffer only partly ever touched (MakeSparse).
//
// The Go heap backs a large object with 4 KiB pages, each faulted in on its first touch. On a virtual
// machine with shadow page tables (a PVM guest) a fault costs 30-40 µs, and memory the process frees
// goes back to the hypervisor, so a node that fills a few hundred MiB of fresh buffers spends seconds of
// CPU in faults; in a mapping advised MADV_HUGEPAGE one fault backs 2 MiB (docs/performance-log.md,
// "Calibration, session 12"). Where the kernel has no huge page to give, the mapping is as good as the
// heap's pages.
//
// The Go runtime does not count these buffers, so while one is held the process's soft memory limit
// (debug.SetMemoryLimit), when one is set, is lowered by its size and raised again when it is freed:
// the heap and the buffers together stay under the limit the process was given (a build's --mem).
// Before a large buffer is made, the collector runs when the heap's garbage would otherwise share
// the limit with it (MakeRoom).
package hugebuf

import "unsafe"

// Elem is the element types a buffer may hold: plain values, no pointers (the collector does not scan
// the buffers).
type Elem interface {
	~uint8 | ~int8 | ~uint16 | ~int16 | ~uint32 | ~int32 | ~float32 | ~float64
}

// Min is the size below which Make allocates on the Go heap (a huge page's worth: a smaller mapping
// cannot hold one).
const Min = 2 << 20

// Make returns a zeroed slice of n values and the function that frees it. After free the slice must not
// be used; free may be called more than once (the later calls do nothing). A buffer under Min bytes, or
// any buffer where mappings are not made (not Linux), is allocated on the Go heap and free does nothing.
// A mapping that fails panics, as the runtime does when the heap cannot grow; Alloc returns the error.
func Make[T Elem](n int) ([]T, func()) {
	b, free, err := Alloc[T](n)
	if err != nil {
		panic(err.Error())
	}
	return b, free
}

// Alloc is Make with the mapping's failure returned (the error names the size) instead of a panic.
func Alloc[T Elem](n int) ([]T, func(), error) { return alloc[T](n, true) }

// MakeSparse is Make for a buffer of which only a part is ever touched (a Hessian's upper triangle,
// every row of which shares its pages with the strict lower triangle of others): the mapping is
// advised against huge pages, so the pages never touched are never backed (a 2 MiB huge page would
// back the untouched part around what is touched). Pages are faulted in 4 KiB at a time on their first
// touch; populate what a first pass will write beforehand (MADV_POPULATE_WRITE), on several cores.
// Unlike a slice of the Go heap, it is not cleared on allocation: a recycled heap span of this size is
// zeroed by one goroutine, page by page.
func MakeSparse[T Elem](n int) ([]T, func()) {
	b, free, err := alloc[T](n, false)
	if err != nil {
		panic(err.Error())
	}
	return b, free
}

func alloc[T Elem](n int, huge bool) ([]T, func(), error) {
	var zero T
	size := n * int(unsafe.Sizeof(zero))
	if n <= 0 || size < Min {
		return make([]T, n), func() {}, nil
	}
	MakeRoom(int64(size))
	b, free, err := mapBytes(size, huge)
	if err != nil {
		return nil, nil, err
	}
	if b == nil {
		return make([]T, n), func() {}, nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n), free, nil
}

// Reserve counts n bytes the process holds outside the Go heap by other means (a mapping of a file
// whose pages it reads) against its soft memory limit, as Make does for its buffers, until the returned
// function is called (more calls do nothing).
func Reserve(n int64) func() {
	return reserve(n)
}
