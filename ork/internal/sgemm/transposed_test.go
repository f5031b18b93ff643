package sgemm

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"orkpipe/internal/testfiles"
)

// TestNTShortRows checks NT bit for bit where rows of B are shorter than the values before their
// 16-byte boundary (K 1-3 in rows four values apart, at every offset): the transposed kernel's plan
// has only values for lane 0. On AVX-512 and on AVX2 (dotT16, dotT8).
func TestNTShortRows(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testfiles.SkipBuild(t, "gonum's Sgemm sums in this order only on amd64 (elsewhere its DotUnitary is a plain loop, fused); TestDotMatchesKernels covers NT there")
	}
	forKernels(t, func(name string) {
		r := rand.New(rand.NewPCG(23, 24))
		for k := 1; k <= 3; k++ {
			for off := range 4 {
				const m, n, ldb = 3, 32, 4
				a := values(r, m*k)
				b := values(r, off+n*ldb)[off:]
				want, got := make([]float32, m*n), make([]float32, m*n)
				gonum.Implementation{}.Sgemm(blas.NoTrans, blas.Trans, m, n, k, 1, a, k, b, ldb, 0, want, n)
				NT(m, n, k, a, k, b, ldb, 0, got, n)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: k %d off %d: c[%d] = %v, gonum %v", name, k, off, i, got[i], want[i])
					}
				}
			}
		}
	})
}
