package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	gonumblas "gonum.org/v1/gonum/blas/gonum"
	"gonum.org/v1/gonum/lapack/gonum"

	"orkpipe/internal/testfiles"
)

// gonumBLAS makes blas64 gonum's own BLAS until the test ends: the references these tests compare
// with bit for bit are gonum's LAPACK routines, which call whatever blas64 holds — under -tags blas
// OpenBLAS, whose Ddot and Daxpy sum in another order than the gonum assembly dlatrsUpper follows.
func gonumBLAS(t *testing.T) {
	prev := blas64.Implementation()
	blas64.Use(gonumblas.Implementation{})
	t.Cleanup(func() { blas64.Use(prev) })
}

// randomFactor returns a random row-major upper triangle n wide (rows lda apart) with a positive
// diagonal: the Cholesky factor of UᵀU, made in n²/2 steps (choleskyFactor takes 2n³), wide enough
// for several of the solves' outer blocks. NaN below the diagonal.
func randomFactor(r *rand.Rand, n, lda int) []float64 {
	a := make([]float64, (n-1)*lda+n)
	for i := range n {
		for j := range i {
			a[i*lda+j] = math.NaN()
		}
		a[i*lda+i] = 0.05 + r.Float64()
		for j := i + 1; j < n; j++ {
			a[i*lda+j] = r.NormFloat64() * 0.02
		}
	}
	return a
}

// choleskyFactor returns the row-major upper Cholesky factor (rows lda apart) of XᵀX/t + damp·I for
// t = 2n random rows x, an upper triangle with what a Hessian's factor has (a positive diagonal,
// columns with norms many times their diagonal), NaN below the diagonal so that a read of it shows.
func choleskyFactor(r *rand.Rand, n, lda int, damp float64) []float64 {
	t := 2 * n
	x := make([]float64, t*n)
	for i := range x {
		x[i] = r.NormFloat64() * (1 + float64(i%n%7))
	}
	a := make([]float64, (n-1)*lda+n)
	for i := range n {
		for j := i; j < n; j++ {
			s := 0.0
			for l := range t {
				s += x[l*n+i] * x[l*n+j]
			}
			a[i*lda+j] = s / float64(t)
		}
		a[i*lda+i] += damp
	}
	if !(gonum.Implementation{}).Dpotrf(blas.Upper, n, a, lda) {
		panic("test matrix not positive definite")
	}
	for i := range n {
		for j := range i {
			a[i*lda+j] = math.NaN()
		}
	}
	return a
}

// TestDlatrsUpperMatchesGonum compares dlatrsUpper with gonum's Dlatrs bit for bit (x, the column
// norms and the scale) for both forms and both normin, on triangles that take each of its paths:
// Cholesky factors (up to n 300 Dtrsv, from 400 the careful path without scaling), and, at n 450,
// ones gonum must scale or that hold values not finite (a tiny or zero diagonal, entries past bignum, b past
// bignum, a NaN or an infinity). Every path must be taken by both forms.
func TestDlatrsUpperMatchesGonum(t *testing.T) {
	if !poconRows {
		testfiles.SkipBuild(t, "gonum's Ddot and Daxpy are its Go loops in this build, which dlatrsUpper does not follow (poconUpper calls gonum's Dpocon)")
	}
	gonumBLAS(t)
	r := rand.New(rand.NewPCG(3, 4))
	type tri struct {
		name string
		n    int
		pad  int
		mod  func(a []float64, lda int)
		bmag float64
	}
	none := func([]float64, int) {}
	cases := []tri{
		{"n1", 1, 0, none, 1}, {"n2", 2, 1, none, 1}, {"n3", 3, 0, none, 1e3}, {"n9", 9, 2, none, 1},
		{"n100", 100, 0, none, 1}, {"n131", 131, 3, none, 1e-3}, {"n300", 300, 1, none, 10}, {"n517", 517, 0, none, 1},
		{"b past bignum", 450, 0, none, 1e295},
		{"b past the bound", 450, 0, none, 1e275},
		{"b signed zeros", 450, 2, none, 1},
		{"tiny diagonal", 450, 0, func(a []float64, lda int) { a[350*lda+350] = 1e-300 }, 1},
		{"tiny diagonal late", 450, 0, func(a []float64, lda int) { a[3*lda+3] = 1e-290 }, 1},
		{"small diagonal, large b", 450, 0, func(a []float64, lda int) { a[3*lda+3], a[440*lda+440] = 1e-289, 1e-289 }, 1e6},
		{"zero diagonal", 450, 0, func(a []float64, lda int) { a[270*lda+270] = 0 }, 1},
		{"huge entry", 450, 0, func(a []float64, lda int) { a[10*lda+390] = 1e300 }, 1},
		{"overflowing entries", 450, 0, func(a []float64, lda int) { a[10*lda+390], a[11*lda+390] = math.MaxFloat64, math.MaxFloat64 }, 1},
		{"nan entry", 450, 0, func(a []float64, lda int) { a[20*lda+240] = math.NaN() }, 1},
		{"inf diagonal", 450, 0, func(a []float64, lda int) { a[240*lda+240] = math.Inf(1) }, 1},
		{"large entries", 450, 0, func(a []float64, lda int) {
			for j := 300; j < 450; j++ {
				a[50*lda+j] = 1e150
			}
		}, 1e140},
		{"wide", -1500, 3, none, 1},
		{"wide, signed zeros", -1300, 0, none, 1},
		{"wide, huge entry late", -1300, 1, func(a []float64, lda int) { a[600*lda+1250] = 1e300 }, 1},
	}
	impl := gonum.Implementation{}
	seen := map[blas.Transpose]map[latrsPath]bool{blas.Trans: {}, blas.NoTrans: {}}
	for _, c := range cases {
		// A negative n asks for a random factor that wide (the careful path, several outer blocks of
		// the row-order solves), solved on 1, 2 and 3 cores.
		var a []float64
		procs := []int{runtime.GOMAXPROCS(0)}
		if c.n < 0 {
			c.n = -c.n
			a = randomFactor(r, c.n, c.n+c.pad)
			procs = []int{1, 2, 3}
		} else {
			a = choleskyFactor(r, c.n, c.n+c.pad, 0.01)
		}
		lda := c.n + c.pad
		c.mod(a, lda)
		for _, trans := range []blas.Transpose{blas.Trans, blas.NoTrans} {
			for _, normin := range []bool{false, true} {
				b := make([]float64, c.n)
				for i := range b {
					b[i] = r.NormFloat64() * c.bmag
				}
				switch c.name {
				case "b past bignum":
					b[c.n/2] = 1e296
				case "b signed zeros", "wide, signed zeros": // x_j = -0 for the upper half: Daxpy skips alpha = 0 (else -0 + 0 = +0)
					for i := c.n / 2; i < c.n; i++ {
						b[i] = math.Copysign(0, -1)
					}
					b[c.n/4] = 0
				}
				cn := make([]float64, c.n)
				if normin {
					impl.Dlatrs(blas.Upper, trans, blas.NonUnit, false, c.n, a, lda, make([]float64, c.n), cn)
				}
				wantX, wantC := append([]float64(nil), b...), append([]float64(nil), cn...)
				wantS := impl.Dlatrs(blas.Upper, trans, blas.NonUnit, normin, c.n, a, lda, wantX, wantC)
				for _, p := range procs {
					prev := runtime.GOMAXPROCS(p)
					gotX, gotC := append([]float64(nil), b...), append([]float64(nil), cn...)
					gotS, path := dlatrsUpper(trans, normin, c.n, a, lda, gotX, gotC, make([]float64, c.n))
					runtime.GOMAXPROCS(prev)
					seen[trans][path] = true
					what := fmt.Sprintf("%s, trans %c, normin %v, %d cores (path %d)", c.name, trans, normin, p, path)
					if len(procs) > 1 && c.name != "wide, huge entry late" && path != latrsRows {
						t.Errorf("%s: want the row-order path", what)
					}
					if math.Float64bits(gotS) != math.Float64bits(wantS) {
						t.Errorf("%s: scale %v, gonum %v", what, gotS, wantS)
					}
					sameBits(t, what+": x", gotX, wantX)
					sameBits(t, what+": cnorm", gotC, wantC)
				}
			}
		}
	}
	for trans, paths := range seen {
		for _, p := range []latrsPath{latrsTrsv, latrsRows, latrsGonum} {
			if !paths[p] {
				t.Errorf("trans %c: no case took path %d", trans, p)
			}
		}
	}
}

// sameBits fails the test at the first value of got whose bits differ from want's.
func sameBits(t *testing.T, what string, got, want []float64) {
	t.Helper()
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Errorf("%s[%d] = %v (%#x), gonum %v (%#x)", what, i, got[i], math.Float64bits(got[i]), want[i], math.Float64bits(want[i]))
			return
		}
	}
}

// TestPoconUpperMatchesGonum compares poconUpper with gonum's Dpocon bit for bit on Cholesky factors
// well and badly conditioned, at sizes that run Dtrsv and the careful path, rows packed and not.
func TestPoconUpperMatchesGonum(t *testing.T) {
	gonumBLAS(t)
	r := rand.New(rand.NewPCG(5, 6))
	impl := gonum.Implementation{}
	for _, n := range []int{1, 2, 5, 40, 129, 333, 700} {
		for _, damp := range []float64{1, 1e-3, 1e-12} {
			for _, pad := range []int{0, 3} {
				lda := n + pad
				a := choleskyFactor(r, n, lda, damp)
				anorm := 1 + r.Float64()*float64(n)
				want := impl.Dpocon(blas.Upper, n, a, lda, anorm, make([]float64, 3*n), make([]int, n))
				got := poconUpper(a, n, lda, anorm)
				if math.Float64bits(got) != math.Float64bits(want) {
					t.Errorf("n %d, damp %g, lda %d: rcond %v, gonum %v", n, damp, lda, got, want)
				}
			}
		}
	}
	for _, p := range []int{1, 2, 3} {
		const n, lda = 1400, 1402
		a := randomFactor(rand.New(rand.NewPCG(9, 10)), n, lda)
		want := impl.Dpocon(blas.Upper, n, a, lda, 7, make([]float64, 3*n), make([]int, n))
		prev := runtime.GOMAXPROCS(p)
		got := poconUpper(a, n, lda, 7)
		runtime.GOMAXPROCS(prev)
		if math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("random factor %d wide, %d cores: rcond %v, gonum %v", n, p, got, want)
		}
	}
	if got := poconUpper(nil, 0, 1, 1); got != 1 {
		t.Errorf("n 0: rcond %v, want 1", got)
	}
	if got := poconUpper([]float64{2}, 1, 1, 0); got != 0 {
		t.Errorf("anorm 0: rcond %v, want 0", got)
	}
}

// BenchmarkPocon times the condition estimate of a 2048-wide factor: gonum's Dpocon, then poconUpper.
func BenchmarkPocon(b *testing.B) {
	const n = 2048
	a := choleskyFactor(rand.New(rand.NewPCG(7, 8)), n, n, 0.01)
	b.Run("gonum", func(b *testing.B) {
		for b.Loop() {
			gonum.Implementation{}.Dpocon(blas.Upper, n, a, n, 1, make([]float64, 3*n), make([]int, n))
		}
	})
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			poconUpper(a, n, n, 1)
		}
	})
}
