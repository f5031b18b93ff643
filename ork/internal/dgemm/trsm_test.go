package dgemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestDtrsmMatchesGonum compares Implementation.Dtrsm with gonum's bit for bit on every form (A on
// either side, upper and lower, transposed and not, unit and not), alpha 1, -1 (Dtrtri's), another and
// 0, shapes whose cut columns or rows are whole eights and not, strides wider than the matrices, B
// with zeros (which gonum's right-side loops skip) and infinities, values beyond A's triangle that must
// not be read, on one goroutine and on three, cut however small, and arguments gonum rejects (its panic).
func TestDtrsmMatchesGonum(t *testing.T) {
	defer func(v int) { trsmMin = v }(trsmMin)
	trsmMin = 1
	r := rand.New(rand.NewPCG(13, 14))
	for _, sh := range []struct{ m, n, pad int }{{1, 1, 0}, {3, 5, 1}, {16, 9, 0}, {40, 64, 2}, {67, 23, 1}, {9, 130, 3}} {
		for _, s := range []blas.Side{blas.Left, blas.Right} {
			k := sh.m
			if s == blas.Right {
				k = sh.n
			}
			lda, ldb := k+sh.pad, sh.n+sh.pad
			for _, ul := range []blas.Uplo{blas.Upper, blas.Lower} {
				a := fill(r, (k-1)*lda+k, false)
				for i := range k {
					a[i*lda+i] = 0.5 + r.Float64() // a nonzero diagonal keeps the solves finite
					for j := range k {
						if (ul == blas.Upper && j < i) || (ul == blas.Lower && j > i) {
							a[i*lda+j] = math.NaN() // outside the triangle: never read
						}
					}
				}
				b0 := fill(r, (sh.m-1)*ldb+sh.n, sh.m%2 == 1)
				for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
					for _, d := range []blas.Diag{blas.NonUnit, blas.Unit} {
						for _, alpha := range []float64{1, -1, 0.7, 0} {
							want := append([]float64(nil), b0...)
							gonum.Implementation{}.Dtrsm(s, ul, tA, d, sh.m, sh.n, alpha, a, lda, want, ldb)
							for _, procs := range []int{1, 3} {
								got := append([]float64(nil), b0...)
								prev := runtime.GOMAXPROCS(procs)
								Implementation{}.Dtrsm(s, ul, tA, d, sh.m, sh.n, alpha, a, lda, got, ldb)
								runtime.GOMAXPROCS(prev)
								for i := range want {
									if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
										t.Fatalf("%+v %v %v %v %v alpha %v, %d procs: b[%d] = %v, gonum %v", sh, s, ul, tA, d, alpha, procs, i, got[i], want[i])
									}
								}
							}
						}
					}
				}
			}
		}
	}
	prev := runtime.GOMAXPROCS(3)
	defer runtime.GOMAXPROCS(prev)
	msg := func(f func()) (s string) {
		defer func() { s = fmt.Sprint(recover()) }()
		f()
		return ""
	}
	for _, bad := range []func(impl blas.Float64){
		func(impl blas.Float64) { // A short
			impl.Dtrsm(blas.Left, blas.Upper, blas.NoTrans, blas.NonUnit, 40, 40, 1, make([]float64, 1599), 40, make([]float64, 1600), 40)
		},
		func(impl blas.Float64) { // no such triangle
			impl.Dtrsm(blas.Right, 'x', blas.NoTrans, blas.NonUnit, 40, 40, 1, make([]float64, 1600), 40, make([]float64, 1600), 40)
		},
	} {
		want, got := msg(func() { bad(gonum.Implementation{}) }), msg(func() { bad(Implementation{}) })
		if want == "" || got != want {
			t.Fatalf("bad arguments: panic %q, gonum's %q", got, want)
		}
	}
}

// BenchmarkDtrsm runs the two solves of GPTQ's factorisations at the 27B ffn_down's width (rows 17408
// values apart): the triangular inverse's (X·A = −B, A upper 64 × 64, B 12288 × 64) and the Cholesky
// factorization's panel (Aᵀ·X = B, A upper 64 × 64, B 64 × 12000), by gonum's Dtrsm and by
// Implementation, interleaved; metrics: ms per call and the ratio.
func BenchmarkDtrsm(b *testing.B) {
	const ld = 17408
	r := rand.New(rand.NewPCG(15, 16))
	for _, bc := range []struct {
		name string
		s    blas.Side
		tA   blas.Transpose
		m, n int
	}{{"trtri", blas.Right, blas.NoTrans, 12288, 64}, {"potrf", blas.Left, blas.Trans, 64, 12000}} {
		b.Run(bc.name, func(b *testing.B) {
			a := fill(r, 63*ld+64, false)
			for i := range 64 {
				a[i*ld+i] = 1 + r.Float64()
			}
			b0 := fill(r, (bc.m-1)*ld+bc.n, false)
			x := make([]float64, len(b0))
			var el [2]time.Duration
			it := 0
			for b.Loop() {
				for v := range 2 {
					i := (it + v) % 2
					copy(x, b0)
					start := time.Now()
					if i == 0 {
						gonum.Implementation{}.Dtrsm(bc.s, blas.Upper, bc.tA, blas.NonUnit, bc.m, bc.n, -1, a, ld, x, ld)
					} else {
						Implementation{}.Dtrsm(bc.s, blas.Upper, bc.tA, blas.NonUnit, bc.m, bc.n, -1, a, ld, x, ld)
					}
					el[i] += time.Since(start)
				}
				it++
			}
			b.ReportMetric(el[0].Seconds()*1e3/float64(it), "gonum-ms")
			b.ReportMetric(el[1].Seconds()*1e3/float64(it), "ms")
			b.ReportMetric(el[0].Seconds()/el[1].Seconds(), "x-gonum")
		})
	}
}
