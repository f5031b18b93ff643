package calib

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"orkpipe/ork/internal/parallel"
)

// prefaultUpper asks the kernel to back the upper triangle of h's rows with memory now
// (MADV_POPULATE_WRITE, Linux 5.14+), the rows spread over GOMAXPROCS goroutines: one call per row
// instead of a page fault per 4 KiB inside the first update. Each row's call covers every page the
// update writes in it, from the page holding H[i][i] (shared with the row's strict lower part, which
// is never written) to the row's end; a page left out would be mapped to the zero page when BLAS
// first reads it (beta = 1) and copied on the write after, a second fault and a TLB flush of every
// core. Only a hint: on an error the pages fault as usual.
func prefaultUpper(h *Hessian) {
	const page = 4096
	k := h.K
	parallel.For(k, runtime.GOMAXPROCS(0), func(i int) {
		row := h.Data[i*k+i : (i+1)*k]
		start := uintptr(unsafe.Pointer(&row[0]))
		from := start &^ (page - 1) // the page holding H[i][i]
		// A raw call on addresses: the range starts at or before H[i][i], in the row's strict
		// lower part, in an earlier row when the page begins there, or before h.Data for row 0,
		// where no unsafe.Pointer may point (checkptr refuses it). The page is mapped (it holds
		// H[i][i]) and populating it changes no byte of it.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, from, start-from+uintptr(8*len(row)), unix.MADV_POPULATE_WRITE)
		runtime.KeepAlive(row)
	})
}
