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

// fill returns n values: normal ones over several magnitudes, with zeros, negative zeros and (when
// inf) a few infinities among them.
func fill(r *rand.Rand, n int, inf bool) []float64 {
	x := make([]float64, n)
	for i := range x {
		switch v := r.IntN(40); {
		case v < 4:
			x[i] = 0
		case v < 7:
			x[i] = math.Copysign(0, -1)
		case v == 7 && inf:
			x[i] = math.Inf(1 - 2*r.IntN(2))
		default:
			x[i] = r.NormFloat64() * math.Exp2(float64(r.IntN(12)-6))
		}
	}
	return x
}

// TestDgemmMatchesGonum compares Implementation.Dgemm with gonum's Dgemm bit for bit (signed zeros,
// infinities and NaNs included) for A and Aᵀ, over shapes on both of gonum's paths (serial, and
// parallel in K blocks of 64), shapes of whole tiles and not, strides wider than the matrices, more
// tokens than a packed pass (pack.go), A packed whole and in chunks of rows,
// alpha 1, -1, 0 and another, beta 0, 1 and another, A with zeros throughout, with none (the
// kernels' tiles without the skip) and with one, one and several goroutines, on every path the CPU
// can take.
func TestDgemmMatchesGonum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ m, n, k, pad int }{
		{1, 1, 1, 0}, {3, 5, 7, 2}, {8, 16, 3, 0}, {17, 33, 129, 1}, {130, 70, 200, 3}, {64, 300, 64, 0}, {300, 20, 9, 5},
		{45, 40, 1100, 1},
	}
	// The AVX-512 path's packing as it ships, in passes of 40 tokens (a zero in one pass and not in
	// the next), and with A packed 8 to 80 rows at a time.
	packings := []struct{ k, aMax int }{{packK, packAMax}, {40, packAMax}, {40, 640}}
	if testing.Short() { // internal/avx2host's emulated run: the packing as it ships
		packings = packings[:1]
	}
	for _, sh := range shapes {
		for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
			lda := sh.k + sh.pad
			aLen := (sh.m-1)*lda + sh.k
			if tA == blas.Trans {
				lda = sh.m + sh.pad
				aLen = (sh.k-1)*lda + sh.m
			}
			ldb, ldc := sh.n+sh.pad, sh.n+2*sh.pad
			zs := fill(r, aLen, sh.m%2 == 1)
			b := fill(r, (sh.k-1)*ldb+sh.n, sh.n%2 == 1)
			c0 := fill(r, (sh.m-1)*ldc+sh.n, false)
			for az, a := range [][]float64{zs, noZeros(zs, -1), noZeros(zs, aLen/2)} {
				for _, alpha := range []float64{1, -1, 0, 0.7} {
					for _, beta := range []float64{0, 1, -0.5} {
						want := append([]float64(nil), c0...)
						gonum.Implementation{}.Dgemm(tA, blas.NoTrans, sh.m, sh.n, sh.k, alpha, a, lda, b, ldb, beta, want, ldc)
						forPaths(t, func(path string) {
							for _, procs := range []int{1, 3} {
								for _, pc := range packings {
									got := append([]float64(nil), c0...)
									prev := runtime.GOMAXPROCS(procs)
									packK, packAMax = pc.k, pc.aMax
									Implementation{}.Dgemm(tA, blas.NoTrans, sh.m, sh.n, sh.k, alpha, a, lda, b, ldb, beta, got, ldc)
									packK, packAMax = packings[0].k, packings[0].aMax
									runtime.GOMAXPROCS(prev)
									for i := range want {
										if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
											t.Fatalf("%+v %v A %d alpha %v beta %v, %s, %d procs, packing %+v: c[%d] = %v, gonum %v", sh, tA, az, alpha, beta, path, procs, pc, i, got[i], want[i])
										}
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

// noZeros returns a copy of x with every zero (±0) made 0.5, then x[at] made −0 when at >= 0.
func noZeros(x []float64, at int) []float64 {
	y := append([]float64(nil), x...)
	for i, v := range y {
		if v == 0 {
			y[i] = 0.5
		}
	}
	if at >= 0 {
		y[at] = math.Copysign(0, -1)
	}
	return y
}

// TestNonzero checks nonzero8 (AVX-512) and nonzero4 (AVX2) against a loop over both layouts (a
// token's values consecutive, or rows of consecutive tokens), token counts with and without a tail
// beyond whole eights and fours, with no zero, and with a +0, a −0 or a NaN at every position.
func TestNonzero(t *testing.T) {
	for _, k := range []struct {
		rows  int
		has   bool
		check func(a *float64, ai, al, t int) bool
	}{{8, has8x16, nonzero8}, {4, has4x8, nonzero4}} {
		if !k.has {
			t.Logf("the %d-row check: not on this CPU", k.rows)
			continue
		}
		for _, tl := range []int{1, 3, 4, 5, 7, 8, 9, 16, 130} {
			for _, lay := range []struct{ ai, al int }{{1, 11}, {tl + 3, 1}} {
				n := (k.rows-1)*lay.ai + (tl-1)*lay.al + 1
				x := make([]float64, n+8)
				for i := range x {
					x[i] = 1 + float64(i)
				}
				check := func(what string) {
					t.Helper()
					want := true
					for r := range k.rows {
						for l := range tl {
							if x[r*lay.ai+l*lay.al] == 0 {
								want = false
							}
						}
					}
					if got := k.check(&x[0], lay.ai, lay.al, tl); got != want {
						t.Fatalf("%d rows, t %d ai %d al %d, %s: got %v, want %v", k.rows, tl, lay.ai, lay.al, what, got, want)
					}
				}
				check("no zero")
				for r := range k.rows {
					for l := range tl {
						i := r*lay.ai + l*lay.al
						for _, v := range []float64{0, math.Copysign(0, -1), math.NaN()} {
							old := x[i]
							x[i] = v
							check(fmt.Sprintf("%v at row %d token %d", v, r, l))
							x[i] = old
						}
					}
				}
				// A zero just past the rows or the tokens is not theirs.
				if lay.ai == 1 {
					x[k.rows] = 0
					check("a zero after a token's values")
					x[k.rows] = 1 + float64(k.rows)
				}
			}
		}
	}
}

// TestDgemmRejectsAsGonum: arguments gonum's Dgemm rejects panic with its message; B transposed
// gives gonum's result.
func TestDgemmRejectsAsGonum(t *testing.T) {
	msg := func(f func()) (s string) {
		defer func() { s = fmt.Sprint(recover()) }()
		f()
		return ""
	}
	a, b, c := make([]float64, 12), make([]float64, 12), make([]float64, 12)
	for _, tc := range []struct {
		name                   string
		m, n, k, lda, ldb, ldc int
	}{{"lda", 3, 4, 3, 2, 4, 4}, {"short C", 4, 4, 3, 3, 4, 4}, {"ldc", 3, 4, 3, 3, 4, 3}} {
		want := msg(func() {
			gonum.Implementation{}.Dgemm(blas.NoTrans, blas.NoTrans, tc.m, tc.n, tc.k, 1, a, tc.lda, b, tc.ldb, 0, c, tc.ldc)
		})
		got := msg(func() {
			Implementation{}.Dgemm(blas.NoTrans, blas.NoTrans, tc.m, tc.n, tc.k, 1, a, tc.lda, b, tc.ldb, 0, c, tc.ldc)
		})
		if want == "" || got != want {
			t.Errorf("%s: panic %q, gonum %q", tc.name, got, want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	x, y := fill(r, 40*30, false), fill(r, 50*30, false)
	want, got := make([]float64, 40*50), make([]float64, 40*50)
	gonum.Implementation{}.Dgemm(blas.NoTrans, blas.Trans, 40, 50, 30, 1, x, 30, y, 30, 0, want, 50)
	Implementation{}.Dgemm(blas.NoTrans, blas.Trans, 40, 50, 30, 1, x, 30, y, 30, 0, got, 50)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("B transposed: c[%d] = %v, gonum %v", i, got[i], want[i])
		}
	}
}

// BenchmarkDgemm runs GPTQ's block update (5120 × 2048 -= 5120×128 · 128×2048, A·B, alpha -1) and a
// Hessian stripe's form (Aᵀ·B: 256 × 2048 of 512 tokens, alpha 1), dense, and the same forms at the
// 27B ffn_down's width: B's and C's rows 17408 values apart (a multiple of 4 KiB), GPTQ's update of
// a 640-row chunk's 12000 columns and a stripe of the 17408-wide Hessian (A the same rows as B). It
// runs them by gonum's Dgemm and by Implementation on each path, interleaved in every iteration,
// and reports each time and its ratio to gonum's.
func BenchmarkDgemm(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, bc := range []struct {
		name    string
		tA      blas.Transpose
		m, n, k int
		alpha   float64
		ld      int // B's and C's row stride (and Aᵀ's: A is then B), or 0 for dense matrices
	}{
		{"NN-gptq", blas.NoTrans, 5120, 2048, 128, -1, 0}, {"TN-gram", blas.Trans, 256, 2048, 512, 1, 0},
		{"NN-gptq-27B", blas.NoTrans, 640, 12000, 128, -1, 17408}, {"TN-gram-27B", blas.Trans, 256, 17408, 512, 1, 17408},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lda, ld := bc.k, max(bc.n, bc.ld)
			if bc.tA == blas.Trans {
				lda = bc.m
			}
			a, x := fill(r, bc.m*bc.k, false), fill(r, (bc.k-1)*ld+bc.n, false)
			if bc.ld != 0 && bc.tA == blas.Trans {
				a, lda = x, ld
			}
			c := make([]float64, (bc.m-1)*ld+bc.n)
			names, el, it := timePaths(b, nil,
				func() {
					gonum.Implementation{}.Dgemm(bc.tA, blas.NoTrans, bc.m, bc.n, bc.k, bc.alpha, a, lda, x, ld, 1, c, ld)
				},
				func() {
					Implementation{}.Dgemm(bc.tA, blas.NoTrans, bc.m, bc.n, bc.k, bc.alpha, a, lda, x, ld, 1, c, ld)
				})
			b.ReportMetric(el[0].Seconds()*1e3/float64(it), "gonum-ms")
			for i, p := range names[1:] {
				b.ReportMetric(el[i+1].Seconds()*1e3/float64(it), p+"-ms")
				b.ReportMetric(el[0].Seconds()/el[i+1].Seconds(), p+"-x-gonum")
			}
		})
	}
}

// timePaths runs, at every iteration of b's loop, gonumCall and call on every kernel path of the CPU,
// in an order that rotates from one iteration to the next, each after prep (when not nil; untimed).
// It returns the names ("gonum", then the paths), the time each took in all, and the iterations.
func timePaths(b *testing.B, prep func(), gonumCall, call func()) ([]string, []time.Duration, int) {
	names := []string{"gonum"}
	forPaths(b, func(p string) { names = append(names, p) })
	el := make([]time.Duration, len(names))
	it := 0
	for b.Loop() {
		for j := range el {
			i := (it + j) % len(el)
			if prep != nil {
				prep()
			}
			if i == 0 {
				start := time.Now()
				gonumCall()
				el[i] += time.Since(start)
				continue
			}
			forPaths(b, func(p string) {
				if p == names[i] {
					start := time.Now()
					call()
					el[i] += time.Since(start)
				}
			})
		}
		it++
	}
	return names, el, it
}
