package softmax

import (
	"testing"

	"orkpipe/internal/testfiles"
)

// TestKernelReadsOnlyItsValues puts the row at the end of a page followed by an inaccessible one, for
// every tail length: the kernel's masked loads and stores must not touch a value past the row.
func TestKernelReadsOnlyItsValues(t *testing.T) {
	if !available {
		t.Skip("no AVX-512: the kernel does not run")
	}
	for n := 1; n <= 40; n++ {
		row := testfiles.FloatsBeforeGuard(t, n)
		for i := range row {
			row[i] = float32(i) - 20
		}
		expShift(&row[0], n, 1, &consts)
		for i, v := range row {
			if want := Expf(float32(i) - 21); v != want {
				t.Fatalf("n %d: value %d = %v, Expf %v", n, i, v, want)
			}
		}
	}
}
