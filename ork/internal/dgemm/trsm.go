package dgemm

import (
	"runtime"

	"gonum.org/v1/gonum/blas"

	"orkpipe/ork/internal/parallel"
)

// trsmMin is the fewest multiply-adds (m·n times A's side) a Dtrsm must have to be cut up: below it
// one goroutine solves it whole. A variable so that tests cut small ones.
var trsmMin = 1 << 18

// Dtrsm solves op(A)·X = alpha·B or X·op(A) = alpha·B for X (A triangular), in place of B, with
// gonum's Dtrsm semantics and bits, on GOMAXPROCS goroutines. gonum's loops change B a row at a time,
// every value of the row by the same operation (ScalUnitary, AxpyUnitary: y[j] = x[j]·v + y[j], each
// value alone): with A on the left, each column of B is thus its own solve; with A on the right, each
// row. So B's columns (A on the left) or rows (on the right) cut into ranges are independent solves,
// each gonum's own Dtrsm on its range — every value the same operations in the same order. (The
// Cholesky factorization's panels and the triangular inverse's blocks call it between their products,
// where gonum's serial solve held every other core idle.) Arguments gonum rejects, and small solves,
// go to gonum whole.
func (impl Implementation) Dtrsm(s blas.Side, ul blas.Uplo, tA blas.Transpose, d blas.Diag, m, n int, alpha float64, a []float64, lda int, b []float64, ldb int) {
	k := n
	if s == blas.Left {
		k = m
	}
	workers := runtime.GOMAXPROCS(0)
	if workers < 2 || m <= 0 || n <= 0 || m*n*k < trsmMin || (s != blas.Left && s != blas.Right) ||
		(ul != blas.Upper && ul != blas.Lower) || (tA != blas.NoTrans && tA != blas.Trans && tA != blas.ConjTrans) ||
		(d != blas.NonUnit && d != blas.Unit) || lda < max(1, k) || ldb < max(1, n) || len(a) < lda*(k-1)+k || len(b) < ldb*(m-1)+n {
		impl.Implementation.Dtrsm(s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
		return
	}
	cut := m // A on the right: B's rows
	if s == blas.Left {
		cut = n // on the left: its columns
	}
	parts := min(workers, (cut+7)/8)
	parallel.For(parts, workers, func(p int) {
		lo, hi := cut*p/parts&^7, cut*(p+1)/parts&^7
		if p == parts-1 {
			hi = cut
		}
		if lo >= hi {
			return
		}
		if s == blas.Left {
			impl.Implementation.Dtrsm(s, ul, tA, d, m, hi-lo, alpha, a, lda, b[lo:], ldb)
			return
		}
		impl.Implementation.Dtrsm(s, ul, tA, d, hi-lo, n, alpha, a, lda, b[lo*ldb:], ldb)
	})
}
