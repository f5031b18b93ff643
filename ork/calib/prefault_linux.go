package calib

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// prefaultUpper asks the kernel to back the upper triangle of h's rows with memory now
// (MADV_POPULATE_WRITE, Linux 5.14+), the rows spread over GOMAXPROCS goroutines: one call per row
// instead of a page fault per 4 KiB inside the first update. It populates only pages the update
// writes (whole pages inside each row's upper part). Only a hint: on an error the pages fault as usual.
func prefaultUpper(h *Hessian) {
	const page = 4096
	k := h.K
	parallelFor(k, func(i int) {
		row := h.Data[i*k+i : (i+1)*k]
		base := unsafe.Pointer(&row[0])
		off := int((page - uintptr(base)%page) % page) // to the row's first whole page
		if n := 8*len(row) - off; n >= page {
			_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(base, off)), n), unix.MADV_POPULATE_WRITE)
		}
	})
}
