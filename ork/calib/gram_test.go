package calib

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestGramStripeMatchesGonum checks gramStripe against gonum's Dgemm(Trans, NoTrans) — the pure-Go
// update's reference — bit for bit (signed zeros included) over stripes of whole tiles and not, token
// counts across gramTokens blocks, zero and negative-zero values (a zero factor is skipped), and one
// and several workers, on every path the CPU can take (AVX-512 and AVX2 tiles, Go).
func TestGramStripeMatchesGonum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for ci, tc := range []struct{ k, t, r0, r1 int }{{16, 3, 0, 16}, {40, 129, 4, 20}, {203, 300, 0, 203}, {203, 17, 100, 203}, {96, 256, 32, 33}, {100, 140, 0, 12}} {
		x := make([]float64, tc.t*tc.k)
		for i := range x {
			switch r.IntN(9) {
			case 0:
				x[i] = 0
			case 1:
				x[i] = math.Copysign(0, -1)
			default:
				x[i] = r.NormFloat64() * math.Exp2(float64(r.IntN(10)-5))
			}
		}
		c0 := make([]float64, tc.k*tc.k)
		for i := range c0 {
			c0[i] = r.NormFloat64()
			if i%13 == 0 {
				c0[i] = math.Copysign(0, -1)
			}
		}
		if ci%2 == 0 {
			// Columns that are zero in every token leave their rows of c as they were: -0 stays -0 (an
			// added +0 product would make it +0) and an Inf elsewhere in the token adds no NaN.
			for i := range c0 {
				c0[i] = math.Copysign(0, -1)
			}
			for l := range tc.t {
				x[l*tc.k+tc.r0+1] = 0
				x[l*tc.k+tc.r0+5%(tc.r1-tc.r0)] = math.Copysign(0, -1)
				if l%7 == 0 {
					x[l*tc.k+tc.k-1] = math.Inf(1)
				}
			}
		}
		want := append([]float64(nil), c0...)
		m, n := tc.r1-tc.r0, tc.k-tc.r0
		gonum.Implementation{}.Dgemm(blas.Trans, blas.NoTrans, m, n, tc.t, 1, x[tc.r0:], tc.k, x[tc.r0:], tc.k, 1, want[tc.r0*tc.k+tc.r0:], tc.k)
		forGramPaths(t, func(path string) {
			for _, procs := range []int{1, 3} {
				got := append([]float64(nil), c0...)
				prev := runtime.GOMAXPROCS(procs)
				gramStripe(got, tc.k, x, tc.t, tc.r0, tc.r1)
				runtime.GOMAXPROCS(prev)
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("%+v %s procs %d: c[%d] = %v, gonum %v", tc, path, procs, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestGramRectMatchesGonum checks gramRect on the pending update's blocks (pending.go's Encoder.block)
// against gonum's Dgemm(Trans, NoTrans) into a block of its own (ldc the block's width), bit for bit:
// beta 0 (the block zeroed first) and beta 1 onto earlier values, blocks on the diagonal, right of it
// and left of it, widths of whole tiles and not, on every path the CPU can take.
func TestGramRectMatchesGonum(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const k = 150
	for _, tc := range []struct{ t, r0, r1, c0, c1 int }{{3, 0, 150, 0, 150}, {200, 16, 48, 16, 150}, {129, 40, 45, 3, 77}, {64, 100, 150, 0, 8}, {1, 7, 8, 9, 10}, {130, 3, 15, 20, 52}} {
		x := make([]float64, tc.t*k)
		for i := range x {
			switch r.IntN(7) {
			case 0:
				x[i] = 0
			case 1:
				x[i] = math.Copysign(0, -1)
			default:
				x[i] = r.NormFloat64()
			}
		}
		m, n := tc.r1-tc.r0, tc.c1-tc.c0
		for _, beta := range []float64{0, 1} {
			c0 := make([]float64, m*n)
			for i := range c0 {
				c0[i] = r.NormFloat64()
				if i%5 == 0 {
					c0[i] = math.Copysign(0, -1)
				}
			}
			want := append([]float64(nil), c0...)
			gonum.Implementation{}.Dgemm(blas.Trans, blas.NoTrans, m, n, tc.t, 1, x[tc.r0:], k, x[tc.c0:], k, beta, want, n)
			forGramPaths(t, func(path string) {
				got := append([]float64(nil), c0...)
				if beta == 0 {
					clear(got)
				}
				gramRect(got, n, x, k, tc.t, tc.r0, tc.r1, tc.c0, tc.c1)
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("%+v %s beta %v: c[%d] = %v, gonum %v", tc, path, beta, i, got[i], want[i])
					}
				}
			})
		}
	}
}

// BenchmarkGramStripes runs the pure-Go Hessian update of 512 tokens of a 2048-wide input (every stripe
// of syrkUpper) by gonum's Dgemm and by gramStripe on each path this CPU has, interleaved in every
// iteration, and reports each time and its ratio to gonum's.
func BenchmarkGramStripes(b *testing.B) {
	const k, tok = 2048, 512
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float64, tok*k)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	c := make([]float64, k*k)
	gonumRun := func() {
		for r0 := 0; r0 < k; r0 += stripe {
			r1 := min(r0+stripe, k)
			gonum.Implementation{}.Dgemm(blas.Trans, blas.NoTrans, r1-r0, k-r0, tok, 1, x[r0:], k, x[r0:], k, 1, c[r0*k+r0:], k)
		}
	}
	gram := func() {
		for r0 := 0; r0 < k; r0 += stripe {
			gramStripe(c, k, x, tok, r0, min(r0+stripe, k))
		}
	}
	var paths []string
	forGramPaths(b, func(p string) { paths = append(paths, p) })
	el := make([]time.Duration, len(paths)+1)
	it := 0
	for b.Loop() {
		for j := range el {
			i := (it + j) % len(el)
			start := time.Now()
			if i == 0 {
				gonumRun()
			} else {
				forGramPaths(b, func(p string) {
					if p == paths[i-1] {
						gram()
					}
				})
			}
			el[i] += time.Since(start)
		}
		it++
	}
	b.ReportMetric(el[0].Seconds()*1e3/float64(it), "gonum-ms")
	for i, p := range paths {
		b.ReportMetric(el[i+1].Seconds()*1e3/float64(it), p+"-ms")
		b.ReportMetric(el[0].Seconds()/el[i+1].Seconds(), p+"-x-gonum")
	}
}
