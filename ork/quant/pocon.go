package quant

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/gonum"
)

// The pure-Go build's condition estimate of GPTQ's Cholesky factor: gonum's Dpocon(Upper), whose
// triangular solves (Dlatrs) take their careful, scaling path on a large factor (the growth bound
// they test underflows long before K = 17408) and walk the row-major factor's columns there, one
// value a cache line: ~18 s, single-threaded, of a 27B ffn_down's GPTQ. dlatrsUpper gives gonum's
// results bit for bit with the factor read by rows (on amd64, where gonum's Ddot and Daxpy are its
// assembly: poconRows); see its doc.

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

// columnNorms sets cnorm[j] to Σ_{i<j} |u_ij| (cnorm[0] = 0), each sum in order i as gonum's Dasum of
// the column, the factor read by rows.
func columnNorms(n int, a []float64, lda int, cnorm []float64) {
	clear(cnorm[:n])
	for i := 0; i < n-1; i++ {
		row, c := a[i*lda+i+1:i*lda+n], cnorm[i+1:n]
		for j, v := range row {
			c[j] += math.Abs(v)
		}
	}
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

// solveBlock is the width of the blocks of columns solveUpperRows applies to the rows above them.
const solveBlock = 64

// solveUpperRows is the careful path's Ux = b without scaling, x_j for j from n-1 down, each x_i
// taking x_i + u_ij·(-x_j) for j from n-1 down to i+1 (Daxpy; none for x_j = 0): columns in blocks
// of solveBlock, each block's own triangle column by column, then its products into every row above
// it, that row's values in the block read in one pass. xmax is max |b_i|. It reports false where
// gonum would scale, or when the bound on the values x held is not below latrsSafe.
func solveUpperRows(n int, a []float64, lda int, x, cnorm []float64, xmax float64) bool {
	var alpha [solveBlock]float64
	bound := 0.0 // Σ |x_j|·cnorm[j] >= Σ_j |u_ij·x_j| for every i: with xmax, a bound on every partial sum
	for j1 := n; j1 > 0; {
		j0 := max(0, j1-solveBlock)
		for j := j1 - 1; j >= j0; j-- {
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
			for i := j0; i < j; i++ {
				x[i] = float64(a[i*lda+j]*al) + x[i]
			}
		}
		axpyRowsAbove(j0, j1, a, lda, x, alpha[:j1-j0])
		j1 = j0
	}
	return 2*(xmax+bound) < latrsSafe
}

// axpyRowsAbove adds, to each x_i for i < j0, u_ij·alpha[j-j0] for j from j1-1 down to j0 (none for
// a zero alpha): four rows at a time.
func axpyRowsAbove(j0, j1 int, a []float64, lda int, x, alpha []float64) {
	w := j1 - j0
	i := 0
	for ; i+4 <= j0; i += 4 {
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
	for ; i < j0; i++ {
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
// each x_i, once solved, adds u_ij·x_i to the sums of every j > i. xmax is max |b_i|, then the
// running max gonum keeps; every check is gonum's, exactly. It reports false where gonum would scale.
func solveUpperTransRows(n int, a []float64, lda int, x, cnorm []float64, xmax float64) bool {
	hi, lo := make([]float64, n), make([]float64, n)
	for j := range n {
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
		row := a[j*lda : j*lda+n]
		k := j + 1
		if j%2 == 0 && k < n { // x_j is the last, odd-length term of x_(j+1)'s sum
			lo[k] = float64(row[k]*v) + lo[k]
			k++
		}
		acc := hi
		if j%2 == 1 {
			acc = lo
		}
		r, s := row[k:n], acc[k:n]
		for t, u := range r {
			s[t] = float64(u*v) + s[t]
		}
	}
	return true
}
