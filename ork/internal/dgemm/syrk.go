package dgemm

import (
	"runtime"

	"gonum.org/v1/gonum/blas"

	"orkpipe/ork/internal/parallel"
)

// syrkRows is the height of the row blocks Dsyrk's goroutines take.
const syrkRows = 8

// Dsyrk computes C = alpha·A·Aᵀ + beta·C or alpha·Aᵀ·A + beta·C (C symmetric, one triangle) with
// gonum's Dsyrk semantics and bits. The form the Cholesky factorization's panels call (upper, Aᵀ·A)
// runs on the kernels; every other form, and arguments gonum rejects, go to gonum itself.
//
// gonum computes that form row by row: the row's values from the diagonal on scaled by beta (zeros for
// beta 0), then for l = 0..k-1 in order, where tmp = alpha·a[l][i] is not zero, c[i][j] =
// a[l][j]·tmp + c[i][j] (AxpyUnitary) — Dgemm's order for Aᵀ·A on the upper triangle. Here each block
// of syrkRows rows takes its values left of the block's last row in Go (the triangle) and those right
// of it on the kernels, as Dgemm's rectangles.
func (impl Implementation) Dsyrk(ul blas.Uplo, tA blas.Transpose, n, k int, alpha float64, a []float64, lda int, beta float64, c []float64, ldc int) {
	if !has4x8 || ul != blas.Upper || !(tA == blas.Trans || tA == blas.ConjTrans) || alpha == 0 || n <= 0 || k < 0 ||
		lda < max(1, n) || ldc < max(1, n) || (k > 0 && len(a) < lda*(k-1)+n) || len(c) < ldc*(n-1)+n {
		impl.Implementation.Dsyrk(ul, tA, n, k, alpha, a, lda, beta, c, ldc)
		return
	}
	if beta != 1 {
		for i := range n {
			ci := c[i*ldc+i : i*ldc+n]
			if beta == 0 {
				clear(ci)
				continue
			}
			for j := range ci {
				ci[j] *= beta
			}
		}
	}
	if k == 0 {
		return
	}
	p := product{m: n, n: n, k: k, alpha: alpha, a: a, ai: 1, al: lda, b: a, ldb: lda, c: c, ldc: ldc}
	blocks := (n + syrkRows - 1) / syrkRows
	workers := min(blocks, runtime.GOMAXPROCS(0))
	if n*n*k < 1<<17 {
		workers = 1
	}
	parallel.For(blocks, workers, func(b int) {
		i0 := b * syrkRows
		i1 := min(i0+syrkRows, n)
		for l0 := 0; l0 < k; l0 += blockK {
			l1 := min(l0+blockK, k)
			for r := i0; r < i1; r++ {
				p.sums(l0, l1, r, r+1, r, i1)
			}
			p.block(l0, l1, i0, i1, i1, n)
		}
	})
}
