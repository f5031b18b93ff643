package softmax

import (
	"testing"

	"orkpipe/internal/testfiles"
)

// TestKernelReadsOnlyItsValues puts the row at the end of a page followed by an inaccessible one, for
// every tail length: the kernel's masked loads and stores must not touch a value past the row.
func TestKernelReadsOnlyItsValues(t *testing.T) {
	forKernels(t, func(kernel string) {
		for n := 1; n <= 40; n++ {
			row := testfiles.FloatsBeforeGuard(t, n)
			for i := range row {
				row[i] = float32(i) - 20
			}
			expShift(&row[0], n, 1)
			for i, v := range row {
				if want := Expf(float32(i) - 21); v != want {
					t.Fatalf("%s: n %d: value %d = %v, Expf %v", kernel, n, i, v, want)
				}
			}
		}
	})
}

// TestMaxReadsOnlyItsValues puts rows of 8 to 40 values at the end of a page followed by an
// inaccessible one: Max's kernel, whose last block ends at the row's end, must not read past it.
func TestMaxReadsOnlyItsValues(t *testing.T) {
	forKernels(t, func(kernel string) {
		for n := 8; n <= 40; n++ {
			row := testfiles.FloatsBeforeGuard(t, n)
			for i := range row {
				row[i] = float32(i%13) - 20
			}
			if got, want := Max(row), maxBefore(row); got != want {
				t.Fatalf("%s: n %d: Max %v, want %v", kernel, n, got, want)
			}
		}
	})
}
