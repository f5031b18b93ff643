package sgemm

import (
	"math/rand/v2"
	"testing"

	"orkpipe/internal/testfiles"
)

// TestNNReadsOnlyItsColumns puts B's last row at the end of a page followed by an inaccessible one,
// for every width: the kernels' masked loads must not touch a value past a row's n columns.
func TestNNReadsOnlyItsColumns(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	forKernels(t, func(kernels string) {
		for n := 1; n <= 80; n++ {
			const k = 3
			b := testfiles.FloatsBeforeGuard(t, k*n)
			copy(b, values(r, k*n))
			a := values(r, k)
			got, want := make([]float32, n), make([]float32, n)
			gonumNN(1, n, k, a, k, b, n, want, n)
			NN(1, n, k, a, k, b, n, got, n)
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("%s: n %d: c[%d] = %v, gonum %v", kernels, n, j, got[j], want[j])
				}
			}
		}
	})
}
