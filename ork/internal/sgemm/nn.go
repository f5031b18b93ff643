package sgemm

import (
	"fmt"

	"gonum.org/v1/gonum/blas/gonum"
)

// NN sets C = A·B: C is m×n (row stride ldc), A m×k (lda), B k×n (ldb), all row-major, with the bits
// of gonum's Sgemm(NoTrans, NoTrans, 1, A, B, 0, C). gonum sums every output the same way on its
// serial and parallel paths: from +0, the rounded products b_lj·a_il for l = 0..k-1 in order, each
// added as it comes, skipping every l whose a_il is ±0 (its loop tests the scaled value before the
// axpy) — one sum per output, no lanes, so the order does not depend on the shape. The kernels keep
// a row's outputs in registers over all of k: on AVX-512 64 columns at a time (nn64, nn16), on AVX2
// 32 (nn32) and the last columns eight at a time (nn8); without AVX2 gonum's serial loop (its axpy a
// value of A) runs here, without the goroutines of its parallel path. Off amd64 that loop is gonum's
// Go AxpyUnitary, whose multiply-add the compiler fuses (arm64): the bits of gonum's Sgemm there, not
// amd64's. It panics on shapes the slices do not hold.
func NN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 || lda < max(1, k) || ldb < max(1, n) || ldc < max(1, n) {
		panic(fmt.Sprintf("sgemm: NN m %d n %d k %d lda %d ldb %d ldc %d", m, n, k, lda, ldb, ldc))
	}
	if m == 0 || n == 0 {
		return
	}
	if len(a) < (m-1)*lda+k || (k > 0 && len(b) < (k-1)*ldb+n) || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("sgemm: NN %d x %d x %d: A has %d values, B %d, C %d", m, n, k, len(a), len(b), len(c)))
	}
	switch {
	case k == 0 || !available:
		for i := range m {
			ci := c[i*ldc:][:n]
			clear(ci)
			for l, v := range a[i*lda:][:k] {
				if v != 0 {
					gonum.Implementation{}.Saxpy(n, v, b[l*ldb:][:n], 1, ci, 1)
				}
			}
		}
	case available512:
		for i := range m {
			for j := 0; j < n; j += 64 {
				w := min(64, n-j)
				mask := ^uint64(0) >> (64 - w)
				if w <= 16 {
					nn16(&a[i*lda], k, &b[j], ldb, &c[i*ldc+j], mask)
				} else {
					nn64(&a[i*lda], k, &b[j], ldb, &c[i*ldc+j], mask)
				}
			}
		}
	default:
		for i := range m {
			j := 0
			for ; j+32 <= n; j += 32 {
				nn32(&a[i*lda], k, &b[j], ldb, &c[i*ldc+j])
			}
			for ; j < n; j += 8 {
				nn8(&a[i*lda], k, &b[j], ldb, &c[i*ldc+j], &laneMask8[8-min(8, n-j)])
			}
		}
	}
}

// laneMask8 is eight lanes of ones then eight of zeros: the eight at laneMask8[8-w:] select the first
// w lanes of a register (nn8's mask).
var laneMask8 = [16]int32{-1, -1, -1, -1, -1, -1, -1, -1}
