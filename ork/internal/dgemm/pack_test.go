package dgemm

import (
	"math"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestPackedSkipsAsGonum checks the packed path's choice of kernel per row tile and pass: B is all
// infinities, so a product gonum skips (a zero tmp) and the kernel does not would turn C's value into
// a NaN. A holds one value that makes tmp zero — a ±0 for alpha ±1, a small value for alpha the
// smallest subnormal (tmp underflows) — at a tile's first and last rows and at every token in turn
// (every pass of packK tokens, its first and last), for A and Aᵀ, A packed whole and 8 rows at a
// time, on one goroutine and on three.
func TestPackedSkipsAsGonum(t *testing.T) {
	if !has8x16 {
		t.Skip("the packed path needs AVX-512")
	}
	defer func(k, aMax int) { packK, packAMax = k, aMax }(packK, packAMax)
	packK = 24
	const m, n, k = 20, 33, 80 // two whole row tiles and 4 rows; four passes, the last short
	b := make([]float64, k*n)
	for i := range b {
		b[i] = math.Inf(1)
	}
	for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
		for _, alpha := range []float64{1, -1, math.SmallestNonzeroFloat64} {
			for _, aMax := range []int{1 << 21, 8 * k} {
				packAMax = aMax
				for _, i := range []int{0, 7, 8, 15, 17, 19} { // tiles' first and last rows, the rows beyond
					for l := range k {
						a := make([]float64, m*k)
						for x := range a {
							a[x] = 1 + float64(x%5)
						}
						at := i*k + l
						lda := k
						if tA == blas.Trans {
							at, lda = l*m+i, m
						}
						a[at] = math.Copysign(0, float64(l%2*2-1))
						if alpha != 1 && alpha != -1 {
							a[at] = 0.25 // alpha·a rounds to zero; alpha times every other value does not
						}
						want := make([]float64, m*n)
						gonum.Implementation{}.Dgemm(tA, blas.NoTrans, m, n, k, alpha, a, lda, b, n, 1, want, n)
						for _, procs := range []int{1, 3} {
							got := make([]float64, m*n)
							prev := runtime.GOMAXPROCS(procs)
							Implementation{}.Dgemm(tA, blas.NoTrans, m, n, k, alpha, a, lda, b, n, 1, got, n)
							runtime.GOMAXPROCS(prev)
							for x := range want {
								if math.Float64bits(got[x]) != math.Float64bits(want[x]) {
									t.Fatalf("%v alpha %v, A packed %d values at a time, %d procs, tmp zero at row %d token %d: c[%d] = %v, gonum %v",
										tA, alpha, aMax, procs, i, l, x, got[x], want[x])
								}
							}
						}
					}
				}
			}
		}
	}
}
