package quant

import (
	"math"
	"runtime"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/gonum"

	"orkpipe/ork/internal/parallel"
)

// The pure-Go build's condition estimate of GPTQ's Cholesky factor: gonum's Dpocon(Upper), whose
// triangular solves (Dlatrs) take their careful, scaling path on a large factor (the growth bound
// they test underflows long before K = 17408) and walk the row-major factor's columns there, one
// value a cache line: ~18 s, single-threaded, of a 27B ffn_down's GPTQ. dlatrsUpper gives gonum's
// results bit for bit with the factor read by rows, in blocks whose products into the rest of the
// factor run on every core (on amd64, where gonum's Ddot and Daxpy are its assembly: poconRows); see
// its doc.

// Dlatrs's thresholds: smlnum = dlamchS/dlamchP, bignum its reciprocal; and a bound below which
// bignum - x rounds to bignum (the ulp of values just below 2^970 is 2^917).
const (
	latrsSmall = 0x1p-970
	latrsBig   = 0x1p970
	latrsSafe  = 0x1p900
)

// latrsPath says how dlatrsUpper solved a system.
type latrsPath int

const (
	latrsTrsv  latrsPath = iota // the growth bound allowed Dtrsv (gonum's choice, gonum's call)
	latrsRows                   // the careful path's arithmetic, read by rows, no scaling needed
	latrsGonum                  // scaling needed or a value not finite: gonum's Dlatrs itself
)

// poconUpper is gonum's Dpocon(Upper, n, a, lda, anorm) with dlatrsUpper for its solves: the
// reciprocal condition number estimate of A = UᵀU from its row-major upper factor U and A's 1-norm,
// bit for bit gonum's (TestPoconUpperMatchesGonum); gonum's Dpocon itself where poconRows is false.
func poconUpper(a []float64, n, lda int, anorm float64) float64 {
	if n == 0 {
		return 1
	}
	if anorm == 0 {
		return 0
	}
	impl := gonum.Implementation{}
	if !poconRows {
		return impl.Dpocon(blas.Upper, n, a, lda, anorm, make([]float64, 3*n), make([]int, n))
	}
	work, iwork, save := make([]float64, 3*n), make([]int, n), make([]float64, n)
	var (
		rcond, ainvnm float64
		kase          int
		isave         [3]int
		normin        bool
	)
	for {
		ainvnm, kase = impl.Dlacn2(n, work[n:], work, iwork, ainvnm, kase, &isave)
		if kase == 0 {
			if ainvnm != 0 {
				rcond = (1 / ainvnm) / anorm
			}
			return rcond
		}
		sl, _ := dlatrsUpper(blas.Trans, normin, n, a, lda, work[:n], work[2*n:], save)
		normin = true
		su, _ := dlatrsUpper(blas.NoTrans, normin, n, a, lda, work[:n], work[2*n:], save)
		if scale := sl * su; scale != 1 {
			ix := blas64.Implementation().Idamax(n, work, 1)
			if scale == 0 || scale < math.Abs(work[ix])*0x1p-1022 {
				return rcond
			}
			impl.Drscl(n, scale, work, 1)
		}
	}
}

// dlatrsUpper is gonum's Dlatrs(Upper, trans, NonUnit, normin, n, a, lda, x, cnorm): x, cnorm and
// the returned scale bit for bit gonum's, save (n values) its scratch. Where gonum's growth bound
// allows Dtrsv it calls Dtrsv, as gonum does. Otherwise gonum walks columns: for Uᵀx = b each x_j
// takes Ddot of column j above the diagonal with x (two partial sums, even and odd positions, as
// gonum's DotInc keeps them), for Ux = b each x_j, once divided, is Daxpy'd down its column into
// the x_i above it, with checks between the steps that scale x when it could overflow. Here the
// same products and sums run with U read by rows: column norms and Uᵀx's partial sums accumulated
// row after row, Ux's updates applied a block of columns at a time to each row above the block,
// every value's operations still in gonum's order. When a check would scale x (or a value is not
// finite, or a column norm exceeds bignum) x is restored from save and gonum's Dlatrs runs instead.
// For Ux the checks read max |x_i| over the values not yet solved, which the row order does not
// form; they are decided as for max |x_i| = 0, exact when every value x ever holds stays below
// 2^900 (bignum - max rounds to bignum), which is verified at the end from the solution (else gonum).
func dlatrsUpper(trans blas.Transpose, normin bool, n int, a []float64, lda int, x, cnorm, save []float64) (float64, latrsPath) {
	impl := gonum.Implementation{}
	gonumSolve := func() (float64, latrsPath) {
		copy(x[:n], save)
		return impl.Dlatrs(blas.Upper, trans, blas.NonUnit, normin, n, a, lda, x, cnorm), latrsGonum
	}
	if n == 0 || lda < max(1, n) || len(a) < (n-1)*lda+n || len(x) < n || len(cnorm) < n || len(save) < n {
		return impl.Dlatrs(blas.Upper, trans, blas.NonUnit, normin, n, a, lda, x, cnorm), latrsGonum
	}
	copy(save, x[:n])
	if !normin {
		columnNorms(n, a, lda, cnorm)
	}
	bi := blas64.Implementation()
	for j := range n {
		if c, d := cnorm[j], a[j*lda+j]; !(c <= latrsBig) || math.IsInf(d, 0) || math.IsNaN(d) || math.IsInf(x[j], 0) || math.IsNaN(x[j]) {
			return gonumSolve() // gonum scales the norms (tscal != 1) or meets a value not finite
		}
	}
	xmax := math.Abs(x[bi.Idamax(n, x, 1)])
	if latrsGrowth(trans, n, a, lda, xmax, cnorm) > latrsSmall {
		bi.Dtrsv(blas.Upper, trans, blas.NonUnit, n, a, lda, x, 1)
		return 1, latrsTrsv
	}
	if xmax > latrsBig {
		return gonumSolve()
	}
	ok := false
	if trans == blas.NoTrans {
		ok = solveUpperRows(n, a, lda, x, cnorm, xmax)
	} else {
		ok = solveUpperTransRows(n, a, lda, x, cnorm, xmax)
	}
	if !ok {
		return gonumSolve()
	}
	return 1, latrsRows
}

// forStripes cuts [lo, hi) into one stripe of consecutive columns (or rows) a core, each a multiple
// of eight long but the last, and calls f(c0, c1) for each on its own goroutine.
func forStripes(lo, hi int, f func(c0, c1 int)) {
	if hi <= lo {
		return
	}
	w := runtime.GOMAXPROCS(0)
	step := ((hi-lo+w-1)/w + 7) &^ 7
	parallel.Split(hi-lo, step, func(s0, s1 int) { f(lo+s0, lo+s1) })
}

// columnNorms sets cnorm[j] to Σ_{i<j} |u_ij| (cnorm[0] = 0), each sum in order i as gonum's Dasum of
// the column, the factor read by rows: stripes of columns on every core.
func columnNorms(n int, a []float64, lda int, cnorm []float64) {
	clear(cnorm[:n])
	forStripes(1, n, func(c0, c1 int) {
		c := cnorm[c0:c1]
		for i := 0; i < c1-1; i++ {
			lo := max(c0, i+1)
			row := a[i*lda+lo : i*lda+c1]
			for j, v := range row {
				c[lo-c0+j] += math.Abs(v)
			}
		}
	})
}

// latrsGrowth is Dlatrs's bound on the growth of the solution (upper, not unit, norms unscaled):
// Dtrsv runs when it exceeds smlnum.
func latrsGrowth(trans blas.Transpose, n int, a []float64, lda int, xmax float64, cnorm []float64) float64 {
	grow := 1 / math.Max(xmax, latrsSmall)
	xbnd := grow
	if trans == blas.NoTrans {
		for j := n - 1; j >= 0; j-- {
			if grow <= latrsSmall {
				return grow
			}
			tjj := math.Abs(a[j*lda+j])
			xbnd = math.Min(xbnd, math.Min(1, tjj)*grow)
			if tjj+cnorm[j] >= latrsSmall {
				grow *= tjj / (tjj + cnorm[j])
			} else {
				grow = 0
			}
		}
		return xbnd
	}
	for j := range n {
		if grow <= latrsSmall {
			return grow
		}
		xj := 1 + cnorm[j]
		grow = math.Min(grow, xbnd/xj)
		if tjj := math.Abs(a[j*lda+j]); xj > tjj {
			xbnd *= tjj / xj
		}
	}
	return math.Min(grow, xbnd)
}

// divide is the careful path's division of x_j by u_jj when it needs no scaling: false where gonum
// would scale x (or zero it, for a zero or NaN u_jj).
func divide(xj, d float64) (float64, bool) {
	tjj := math.Abs(d)
	switch {
	case tjj > latrsSmall:
		if tjj < 1 && math.Abs(xj) > tjj*latrsBig {
			return 0, false
		}
	case tjj > 0:
		if math.Abs(xj) > tjj*latrsBig {
			return 0, false
		}
	default:
		return 0, false
	}
	return xj / d, true
}

// solveBlock is the width of the blocks of columns solveUpperRows solves column by column, and of
// the blocks of rows solveUpperTransRows adds to the sums of the columns after them: even, so that in
// the latter an even row's odd-length term falls in its own block.
const solveBlock = 64

var _ [1 - solveBlock%2]struct{} // solveBlock is even

// solveOuter is the width of the blocks of columns solveUpperRows applies to every row above them:
// a page of each row (a factor's rows are far apart, and each row read costs a TLB miss).
const solveOuter = 512

// solveUpperRows is the careful path's Ux = b without scaling, x_j for j from n-1 down, each x_i
// taking x_i + u_ij·(-x_j) for j from n-1 down to i+1 (Daxpy; none for x_j = 0). Columns go in
// blocks of solveOuter, each cut in blocks of solveBlock: such a block's own triangle column by
// column, then its products into the rows of the outer block above it; then the outer block's
// products into every row above it, that row's values in the block read in one pass, in stripes
// of rows on every core. Every x_i still takes its terms in order j. xmax is max |b_i|. It reports
// false where gonum would scale, or when the bound on the values x held is not below latrsSafe.
func solveUpperRows(n int, a []float64, lda int, x, cnorm []float64, xmax float64) bool {
	var alpha [solveOuter]float64
	bound := 0.0 // Σ |x_j|·cnorm[j] >= Σ_j |u_ij·x_j| for every i: with xmax, a bound on every partial sum
	for j1 := n; j1 > 0; {
		j0 := max(0, j1-solveOuter)
		for b1 := j1; b1 > j0; {
			b0 := max(j0, b1-solveBlock)
			for j := b1 - 1; j >= b0; j-- {
				v, ok := divide(x[j], a[j*lda+j])
				if !ok {
					return false
				}
				x[j] = v
				xj := math.Abs(v)
				if xj > 1 {
					if cnorm[j] > latrsBig*(1/xj) {
						return false
					}
				} else if xj*cnorm[j] > latrsBig {
					return false
				}
				bound += xj * cnorm[j]
				al := -v
				alpha[j-j0] = al
				if al == 0 {
					continue
				}
				for i := b0; i < j; i++ {
					x[i] = float64(a[i*lda+j]*al) + x[i]
				}
			}
			axpyRowsAbove(j0, b0, b0, b1, a, lda, x, alpha[b0-j0:b1-j0])
			b1 = b0
		}
		forStripes(0, j0, func(r0, r1 int) { axpyRowsAbove(r0, r1, j0, j1, a, lda, x, alpha[:j1-j0]) })
		j1 = j0
	}
	return 2*(xmax+bound) < latrsSafe
}

// axpyRowsAbove adds, to each x_i for i in [lo, hi) (rows above j0), u_ij·alpha[j-j0] for j from
// j1-1 down to j0 (none for a zero alpha), in that order: four rows at a time.
func axpyRowsAbove(lo, hi, j0, j1 int, a []float64, lda int, x, alpha []float64) {
	w := j1 - j0
	i := lo
	for ; i+4 <= hi; i += 4 {
		r0 := a[i*lda+j0 : i*lda+j1]
		r1 := a[(i+1)*lda+j0 : (i+1)*lda+j1]
		r2 := a[(i+2)*lda+j0 : (i+2)*lda+j1]
		r3 := a[(i+3)*lda+j0 : (i+3)*lda+j1]
		s0, s1, s2, s3 := x[i], x[i+1], x[i+2], x[i+3]
		for t := w - 1; t >= 0; t-- {
			al := alpha[t]
			if al == 0 {
				continue
			}
			s0 = float64(r0[t]*al) + s0
			s1 = float64(r1[t]*al) + s1
			s2 = float64(r2[t]*al) + s2
			s3 = float64(r3[t]*al) + s3
		}
		x[i], x[i+1], x[i+2], x[i+3] = s0, s1, s2, s3
	}
	for ; i < hi; i++ {
		r := a[i*lda+j0 : i*lda+j1]
		s := x[i]
		for t := w - 1; t >= 0; t-- {
			if al := alpha[t]; al != 0 {
				s = float64(r[t]*al) + s
			}
		}
		x[i] = s
	}
}

// solveUpperTransRows is the careful path's Uᵀx = b without scaling, x_j for j from 0 up: x_j less
// Ddot(u_0j..u_(j-1)j, x_0..x_(j-1)), divided by u_jj. Ddot's two partial sums (hi over even i, lo
// over odd i and, for odd j, the last i = j-1; their sum hi + lo) are accumulated row after row:
// each x_i, once solved, adds u_ij·x_i to the sums of every j > i. Rows go in blocks of solveBlock:
// each x_j of a block solved and added to the sums of the block's later columns, then the block's
// rows added, in order, to the sums of every column after it, in stripes on every core (each sum
// still takes its terms in order i). xmax is max |b_i|, then the running max gonum keeps; every
// check is gonum's, exactly. It reports false where gonum would scale.
func solveUpperTransRows(n int, a []float64, lda int, x, cnorm []float64, xmax float64) bool {
	hi, lo := make([]float64, n), make([]float64, n)
	// sums adds u_jk·x_j for k in [c0, c1) to the sum x_j's parity feeds.
	sums := func(j, c0, c1 int) {
		acc := hi
		if j%2 == 1 {
			acc = lo
		}
		v := x[j]
		r, s := a[j*lda+c0:j*lda+c1], acc[c0:c1]
		for t, u := range r {
			s[t] = float64(u*v) + s[t]
		}
	}
	for j0 := 0; j0 < n; j0 += solveBlock {
		j1 := min(n, j0+solveBlock)
		for j := j0; j < j1; j++ {
			xj := math.Abs(x[j])
			if cnorm[j] > (latrsBig-xj)*(1/math.Max(xmax, 1)) {
				return false
			}
			sum := 0.0
			if j > 0 {
				sum = hi[j] + lo[j]
			}
			v, ok := divide(x[j]-sum, a[j*lda+j])
			if !ok {
				return false
			}
			x[j] = v
			xmax = math.Max(xmax, math.Abs(v))
			k := j + 1
			if j%2 == 0 && k < j1 { // x_j is the last, odd-length term of x_(j+1)'s sum (j1 - j0 is even)
				lo[k] = float64(a[j*lda+k]*v) + lo[k]
				k++
			}
			sums(j, k, j1)
		}
		forStripes(j1, n, func(c0, c1 int) {
			for j := j0; j < j1; j++ {
				sums(j, c0, c1)
			}
		})
	}
	return true
}
