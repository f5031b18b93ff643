package dgemm

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestDtrmmMatchesGonum compares Implementation.Dtrmm with gonum's bit for bit for the kernels' form
// (left, upper, not unit, alpha 1: Dtrtri's) — heights and widths of whole tiles and not, zeros in A's
// upper triangle and none, B with infinities (where a zero's product, not skipped, is NaN) and
// without, values in A's lower triangle that must not be read, strides wider than the matrices, one
// and several goroutines, every path of the CPU — and for a form that goes to gonum (alpha 2).
func TestDtrmmMatchesGonum(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range []struct{ m, n, pad int }{{1, 1, 0}, {5, 3, 1}, {8, 16, 0}, {37, 64, 2}, {130, 40, 0}, {64, 7, 3}, {200, 96, 1}, {333, 48, 2}} {
		lda, ldb := sh.m+sh.pad, sh.n+sh.pad
		a := fill(r, (sh.m-1)*lda+sh.m, false)
		for i := range sh.m {
			a[i*lda+i] = 0.5 + r.Float64() // a nonzero diagonal, as Dtrtri's
			for k := range i {
				a[i*lda+k] = math.NaN() // below the diagonal: never read
			}
		}
		for bi, b0 := range [][]float64{fill(r, (sh.m-1)*ldb+sh.n, false), fill(r, (sh.m-1)*ldb+sh.n, true)} {
			for az, a := range [][]float64{a, noZeros(a, -1)} {
				for _, alpha := range []float64{1, 2} {
					want := append([]float64(nil), b0...)
					gonum.Implementation{}.Dtrmm(blas.Left, blas.Upper, blas.NoTrans, blas.NonUnit, sh.m, sh.n, alpha, a, lda, want, ldb)
					forPaths(t, func(path string) {
						for _, procs := range []int{1, 3} {
							got := append([]float64(nil), b0...)
							prev := runtime.GOMAXPROCS(procs)
							Implementation{}.Dtrmm(blas.Left, blas.Upper, blas.NoTrans, blas.NonUnit, sh.m, sh.n, alpha, a, lda, got, ldb)
							runtime.GOMAXPROCS(prev)
							for i := range want {
								if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
									t.Fatalf("%+v A %d B %d alpha %v, %s, %d procs: b[%d] = %v, gonum %v", sh, az, bi, alpha, path, procs, i, got[i], want[i])
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestDsyrkMatchesGonum compares Implementation.Dsyrk with gonum's bit for bit for the kernels' form
// (upper, Aᵀ·A) — sizes of whole blocks and not, K across blocks, alpha -1 and another, beta 0, 1 and
// another, values below C's diagonal that must stay as they were, A with zeros and without, one and
// several goroutines, every path of the CPU — and for a form that goes to gonum (lower).
func TestDsyrkMatchesGonum(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, sh := range []struct{ n, k, pad int }{{1, 1, 0}, {5, 3, 1}, {8, 200, 0}, {37, 64, 2}, {64, 300, 0}, {100, 17, 3}} {
		lda, ldc := sh.n+sh.pad, sh.n+2*sh.pad
		zs := fill(r, (sh.k-1)*lda+sh.n, sh.n%2 == 1)
		c0 := fill(r, (sh.n-1)*ldc+sh.n, false)
		for az, a := range [][]float64{zs, noZeros(zs, -1)} {
			for _, ul := range []blas.Uplo{blas.Upper, blas.Lower} {
				for _, alpha := range []float64{-1, 0.3} {
					for _, beta := range []float64{0, 1, 0.5} {
						want := append([]float64(nil), c0...)
						gonum.Implementation{}.Dsyrk(ul, blas.Trans, sh.n, sh.k, alpha, a, lda, beta, want, ldc)
						forPaths(t, func(path string) {
							for _, procs := range []int{1, 3} {
								got := append([]float64(nil), c0...)
								prev := runtime.GOMAXPROCS(procs)
								Implementation{}.Dsyrk(ul, blas.Trans, sh.n, sh.k, alpha, a, lda, beta, got, ldc)
								runtime.GOMAXPROCS(prev)
								for i := range want {
									if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
										t.Fatalf("%+v %v A %d alpha %v beta %v, %s, %d procs: c[%d] = %v, gonum %v", sh, ul, az, alpha, beta, path, procs, i, got[i], want[i])
									}
								}
							}
						})
					}
				}
			}
		}
	}
}

// BenchmarkDtrmm times the triangular inverse's panel update as Dtrtri calls it at a 27B ffn_down's
// scale: the upper triangle of rows [0, m) of an (m+64)-wide row-major matrix times the 64 columns
// right of it (B's rows 8 KiB·(m/1024+1/16) apart, as in the factor being inverted; the shape of
// the inverse's middle steps at K = 17408 with m = 8192), gonum and every kernel path of the CPU,
// interleaved; metrics: ms per call and GFLOP/s (m²·n flops).
func BenchmarkDtrmm(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	const m, n = 8192, 64
	const ld = m + n
	a0 := fill(r, m*ld, false)
	for i := range m {
		a0[i*ld+i] = 1 // a unit diagonal keeps repeated products finite
	}
	a := make([]float64, len(a0))
	names, el, it := timePaths(b, func() { copy(a, a0) },
		func() {
			gonum.Implementation{}.Dtrmm(blas.Left, blas.Upper, blas.NoTrans, blas.NonUnit, m, n, 1, a, ld, a[m:], ld)
		},
		func() {
			Implementation{}.Dtrmm(blas.Left, blas.Upper, blas.NoTrans, blas.NonUnit, m, n, 1, a, ld, a[m:], ld)
		})
	flops := float64(m) * m * n
	for i, name := range names {
		b.ReportMetric(el[i].Seconds()*1e3/float64(it), name+"-ms")
		b.ReportMetric(flops*float64(it)/el[i].Seconds()/1e9, name+"-GFLOP/s")
	}
}
