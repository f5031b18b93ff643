package calib

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestPrefaultUpperCoversWrites: after prefaultUpper every page an update of the upper triangle writes
// is resident — each row's H[i][i..K-1], the page holding H[i][i] included (it is shared with the
// row's strict lower part, and when left out BLAS's first read maps the zero page, which its write
// then copies). Widths whose rows are not whole pages put H[i][i] mid-page on most rows.
func TestPrefaultUpperCoversWrites(t *testing.T) {
	const page = 4096
	for _, k := range []int{700, 1000, 1536} {
		h := NewHessian(k)
		prefaultUpper(h)
		base := uintptr(unsafe.Pointer(&h.Data[0])) &^ (page - 1)
		end := uintptr(unsafe.Pointer(&h.Data[len(h.Data)-1])) + 8
		vec := make([]byte, (end-base+page-1)/page)
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, base, end-base, uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatalf("mincore: %v", errno)
		}
		for i := 0; i < k; i++ {
			first := (uintptr(unsafe.Pointer(&h.Data[i*k+i])) - base) / page
			last := (uintptr(unsafe.Pointer(&h.Data[i*k+k-1])) - base) / page
			for p := first; p <= last; p++ {
				if vec[p]&1 == 0 {
					t.Fatalf("K=%d: row %d: page %d of [%d, %d] (H[%d][%d..%d]) not resident after prefaultUpper", k, i, p, first, last, i, i, k-1)
				}
			}
		}
	}
}
