package quant

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/gonum"

	"orkpipe/ork/internal/parallel"
)

// conditionTolerance is gonum/mat's: a factor whose condition estimate exceeds it is rejected
// (as mat.Cholesky.InverseTo does), which makes GPTQ raise the damping.
const conditionTolerance = 1e16

// inverseCholeskyUpper damps the symmetric k x k matrix a (percdamp·mean(diag) on the diagonal)
// and leaves in a, IN PLACE, the upper Cholesky factor U of (H + damp·I)⁻¹ (row-major,
// H⁻¹ = UᵀU), computed by invCholUpper. It returns the percdamp that worked. No k x k copy is
// made: invCholUpper reads and writes only the upper triangle, so the strict lower triangle keeps
// H, and a failed try restores the upper triangle from it (plus a saved diagonal) before retrying
// with percdamp raised by the configured step. With damped nil the strict lower triangle is
// zeroed at the end; otherwise it is left holding H and damped (length k) receives the diagonal
// of the matrix factored, H + damp·I, so that a and damped together still hold that matrix
// (hessBuffer). ctx is checked between the 64-wide blocks of every factorisation; on
// cancellation a holds garbage.
func inverseCholeskyUpper(ctx context.Context, a []float64, k int, c *config, damped []float64) (float64, error) {
	return dampedFactor(ctx, a, k, c, damped, invCholUpper)
}

// dampedFactor is inverseCholeskyUpper with the factorisation factor (invCholUpper, or
// reflectedCholUpper for GPTQ's direct row phase) in place of invCholUpper.
func dampedFactor(ctx context.Context, a []float64, k int, c *config, damped []float64, factor func(context.Context, []float64, int) error) (float64, error) {
	diag := make([]float64, k)
	mean := 0.0
	for i := range diag {
		diag[i] = a[i*k+i]
		mean += diag[i]
	}
	mean /= float64(k)
	pd := c.percDamp
	var lastErr error
	for try := 0; try < c.dampTries; try, pd = try+1, pd+c.dampStep {
		if try > 0 {
			for i := 0; i < k; i++ {
				row := a[i*k : (i+1)*k]
				for j := i + 1; j < k; j++ {
					row[j] = a[j*k+i]
				}
			}
		}
		damp := pd * mean
		for i := 0; i < k; i++ {
			a[i*k+i] = diag[i] + damp
		}
		err := factor(ctx, a, k)
		if err == nil {
			if damped != nil {
				for i := range k {
					damped[i] = diag[i] + damp
				}
				return pd, nil
			}
			parallel.For(k, runtime.GOMAXPROCS(0), func(i int) { clear(a[i*k : i*k+i]) })
			return pd, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return 0, cerr
		}
		lastErr = err
	}
	return 0, fmt.Errorf("%w after %d tries up to percdamp %.4g (mean diag %.4g): %v", ErrCholesky, c.dampTries, pd-c.dampStep, mean, lastErr)
}

// factorSteps are the factorisations invCholUpper chains, each on the upper triangle of a
// row-major n x n matrix a, touching nothing below the diagonal: potrf (Cholesky, false if not
// positive definite), pocon (reciprocal condition estimate of the factor, given H's 1-norm) and
// trtri (inverse of the factor, false if singular). The pure-Go build uses gonumSteps; -tags blas
// installs OpenBLAS's LAPACK (blas.go).
type factorSteps struct {
	potrf func(ctx context.Context, a []float64, n int) (bool, error)
	pocon func(a []float64, n int, anorm float64) (float64, error)
	trtri func(ctx context.Context, a []float64, n int) (bool, error)
}

// gonumSteps are gonum's blocked LAPACK algorithms re-implemented with a ctx check per block, and
// gonum's condition estimate with its solves reading the factor by rows (pocon.go).
var gonumSteps = factorSteps{potrf: potrfUpper, trtri: trtriUpper,
	pocon: func(a []float64, n int, anorm float64) (float64, error) { return poconUpper(a, n, n, anorm), nil }}

// steps is the factorisation backend of this build.
var steps = gonumSteps

// invCholUpper overwrites the upper triangle of the row-major symmetric positive definite a with
// the upper Cholesky factor U of A⁻¹ (A⁻¹ = UᵀU), touching nothing below the diagonal, in
// K³/3 + K³/3 flops: with J the exchange (reversal) matrix, JAJ = VᵀV for an upper V (one
// Cholesky), so A⁻¹ = J·V⁻¹·V⁻ᵀ·J = UᵀU with U = J·V⁻ᵀ·J, upper with a positive diagonal: the
// Cholesky factor of A⁻¹, U[i][j] = V⁻¹[K-1-j][K-1-i]. In place that is: reflect the upper
// triangle across the anti-diagonal (reflectUpper: JAJ's upper triangle, still inside the upper
// triangle), potrf, a condition check, trtri, reflect back. The pure-Go build runs gonum's blocked
// algorithms with a ctx check per block; the -tags blas build runs OpenBLAS's dpotrf/dtrtri
// (parallel) with a ctx check between the steps (timings: docs/performance.md).
func invCholUpper(ctx context.Context, a []float64, k int) error {
	return cholUpper(ctx, a, k, true)
}

// reflectedCholUpper overwrites the upper triangle of the row-major symmetric positive definite a
// with M = U⁻¹, U the upper Cholesky factor of A⁻¹ (A⁻¹ = UᵀU, so A = M·Mᵀ), touching nothing below
// the diagonal, in K³/3 flops: invCholUpper without the triangular inverse. With J and V as there,
// U⁻¹ = J·Vᵀ·J, that is M[i][j] = V[K-1-j][K-1-i]: the factor V itself reflected back across the
// anti-diagonal. GPTQ's direct row phase (gptq_direct.go) runs on M and the inverses of its
// diagonal blocks.
func reflectedCholUpper(ctx context.Context, a []float64, k int) error {
	return cholUpper(ctx, a, k, false)
}

// cholUpper is invCholUpper (inverse true) or reflectedCholUpper (false).
func cholUpper(ctx context.Context, a []float64, k int, inverse bool) error {
	if k == 0 {
		return nil
	}
	if len(a) != k*k {
		return fmt.Errorf("factorisation of %d values as %d x %d", len(a), k, k)
	}
	reflectUpper(a, k)
	anorm := normUpper(a, k)
	if ok, err := steps.potrf(ctx, a, k); err != nil {
		return err
	} else if !ok {
		//lint:ignore ST1005 H is the Hessian, as the GPTQ papers write it
		return fmt.Errorf("H + damp·I is not positive definite")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if rc, err := steps.pocon(a, k, anorm); err != nil {
		return err
	} else if 1/rc > conditionTolerance {
		//lint:ignore ST1005 H is the Hessian, as the GPTQ papers write it
		return fmt.Errorf("H + damp·I is ill-conditioned (condition ~%.3g)", 1/rc)
	}
	if inverse {
		if ok, err := steps.trtri(ctx, a, k); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("inverting H: singular factor")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if i, j, ok := firstNaNUpper(a, k); ok { // NaN from a numerically broken factor
		if inverse {
			return fmt.Errorf("factor of H⁻¹ has NaN at (%d,%d)", i, j)
		}
		return fmt.Errorf("factor of H has NaN at (%d,%d)", i, j)
	}
	reflectUpper(a, k)
	return nil
}

// normUpper is gonum's Dlansy(MaxRowSum, Upper, k, a, k, work), bit for bit: the largest row sum of
// |a| over the symmetric matrix whose upper triangle the row-major k x k a holds (NaN if a sum is),
// each row i's sum in gonum's order — the column above the diagonal from row 0 down, then a_ii,
// then the row right of it — with the rows in GOMAXPROCS ranges, each range's goroutine reading
// every row above its end once (its columns of the row) and its own rows whole. Every row's sum
// reads k values, so equal ranges are equal work.
func normUpper(a []float64, k int) float64 {
	work := make([]float64, k)
	workers := parallel.Workers(k)
	parallel.Split(k, (k+workers-1)/workers, func(j0, j1 int) {
		for i := range j1 {
			row := a[i*k : (i+1)*k]
			if i >= j0 {
				s := work[i] + math.Abs(row[i])
				for _, v := range row[i+1:] {
					s += math.Abs(v)
				}
				work[i] = s
			}
			for j := max(j0, i+1); j < j1; j++ {
				work[j] += math.Abs(row[j])
			}
		}
	})
	var m float64
	for _, v := range work {
		if math.IsNaN(v) {
			return math.NaN()
		}
		m = max(m, v)
	}
	return m
}

// firstNaNUpper returns the first NaN of the upper triangle of the row-major k x k a in row order,
// its bands of rows checked on every core (only when one holds a NaN is the triangle scanned again
// row by row, for the first).
func firstNaNUpper(a []float64, k int) (i, j int, ok bool) {
	const band = 64
	var found atomic.Bool
	parallel.For((k+band-1)/band, runtime.GOMAXPROCS(0), func(b int) {
		for i := b * band; i < min(b*band+band, k) && !found.Load(); i++ {
			for _, v := range a[i*k+i : (i+1)*k] {
				if v != v {
					found.Store(true)
					return
				}
			}
		}
	})
	if !found.Load() {
		return 0, 0, false
	}
	for i := range k {
		for j := i; j < k; j++ {
			if v := a[i*k+j]; v != v {
				return i, j, true
			}
		}
	}
	return 0, 0, false // not reached: a band found one
}

// reflectUpper reflects the upper triangle of the row-major n x n a across the anti-diagonal, in
// place: a[i][j] and a[n-1-j][n-1-i] (both in the upper triangle when i <= j) trade places; the
// strict lower triangle is not touched. It swaps in 16 x 16 tiles (each tile's partner is one
// tile) on up to GOMAXPROCS goroutines, rows of tiles handed out in turn. (A tile's partner's rows
// are n values apart: at n = 17408, a multiple of 4 KiB, 64 of them shared one L1 set and every
// access missed, 0.52 s a reflection on two Zen 5 cores against 0.20 s with 16.)
func reflectUpper(a []float64, n int) {
	const bs = 16
	nb := (n + bs - 1) / bs
	parallel.For(nb, min(runtime.GOMAXPROCS(0), nb/4), func(b int) {
		i0, i1 := b*bs, min(b*bs+bs, n)
		// Each pair is swapped once, from its element with i + j < n-1 (the anti-diagonal
		// itself stays), so no two goroutines touch the same element.
		for j0 := i0; j0 < n-1-i0; j0 += bs {
			j1 := min(j0+bs, n)
			for i := i0; i < i1; i++ {
				jlo, jhi := max(j0, i), min(j1, n-1-i)
				row := a[i*n : (i+1)*n]
				for j, p := jlo, (n-1-jlo)*n+n-1-i; j < jhi; j, p = j+1, p-n {
					row[j], a[p] = a[p], row[j]
				}
			}
		}
	})
}

// fusedPanels is how many of gonum's 64-wide blocks potrfUpper takes together for the update each
// block takes from the rows above it (a super panel).
//
// gonum's blocked Cholesky (Dpotrf, upper) gives block j, rows [j, j+64), the update
// C -= A[0:j, j:j+64]ᵀ·A[0:j, j:n] (Dsyrk on the diagonal block, Dgemm right of it) before factoring
// it: each block's Dgemm reads the whole of A[0:j, j+64:n], up to 1.2 GB for a 17408-wide matrix,
// for 64 rows of output (and the packed Dgemm copies it block by block), so at 27B widths the
// factorization ran at memory speed. The blocks of a super panel, rows [s, s+256), share the part
// of that update from the rows above the super panel: one Dsyrk and one Dgemm over k in [0, s) read
// the operand once for all four blocks; then each block in turn adds the part from the super
// panel's rows above it (k in [s, j), the rows the blocks before it have just finished), is factored
// and solved as before. A 17408-wide factorization on two Zen 5 cores: 0.79x the time (median of
// eight pairs alternating in one process, 21.5-26.2 s against 16.3-22.3 s); eight blocks a super
// panel were level with four, and the same fusion of the triangular inverse's Dtrmm was not faster,
// so trtriUpper is gonum's loop.
//
// The bits are gonum's: every value of these products is a sum over k in ascending order, each
// product rounded and added in turn, skipped where the multiplier is zero (Dgemm's order and Dsyrk's
// are the same per value: ork/internal/dgemm's package doc), so the part over [0, s) followed by the
// part over [s, j) is the same sequence of operations on every value as gonum's one call, on the
// same values (TestPotrfTrtriMatchGonum).
const fusedPanels = 4

// potrfUpper is gonum's Dpotrf(Upper) with a ctx check per block, its blocks' updates from the rows
// above taken fusedPanels blocks at a time (same bits; see fusedPanels). When a block is not
// positive definite it returns false as gonum does, but the later blocks of its super panel already
// hold the part of their update from the rows above it (gonum leaves them as they were): either way
// the upper triangle is garbage, and inverseCholeskyUpper restores it before trying again.
func potrfUpper(ctx context.Context, a []float64, n int) (bool, error) {
	impl := gonum.Implementation{}
	lda := n
	nb := impl.Ilaenv(1, "DPOTRF", "U", n, -1, -1, -1)
	if nb <= 1 || n <= nb {
		return impl.Dpotf2(blas.Upper, n, a, lda), nil
	}
	bi := blas64.Implementation()
	for s := 0; s < n; s += fusedPanels * nb {
		se := min(s+fusedPanels*nb, n)
		if s > 0 { // rows [s, se) from the rows [0, s) above them
			if err := ctx.Err(); err != nil {
				return false, err
			}
			bi.Dsyrk(blas.Upper, blas.Trans, se-s, s, -1, a[s:], lda, 1, a[s*lda+s:], lda)
			if se < n {
				bi.Dgemm(blas.Trans, blas.NoTrans, se-s, n-se, s, -1, a[s:], lda, a[se:], lda, 1, a[s*lda+se:], lda)
			}
		}
		for j := s; j < se; j += nb {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			jb := min(nb, n-j)
			if j > s { // block j from the super panel's rows [s, j) above it
				bi.Dsyrk(blas.Upper, blas.Trans, jb, j-s, -1, a[s*lda+j:], lda, 1, a[j*lda+j:], lda)
			}
			if !impl.Dpotf2(blas.Upper, jb, a[j*lda+j:], lda) {
				return false, nil
			}
			if j+jb < n {
				if j > s {
					bi.Dgemm(blas.Trans, blas.NoTrans, jb, n-j-jb, j-s, -1, a[s*lda+j:], lda, a[s*lda+j+jb:], lda, 1, a[j*lda+j+jb:], lda)
				}
				bi.Dtrsm(blas.Left, blas.Upper, blas.Trans, blas.NonUnit, jb, n-j-jb, 1, a[j*lda+j:], lda, a[j*lda+j+jb:], lda)
			}
		}
	}
	return true, nil
}

// trtriUpper is gonum's Dtrtri(Upper, NonUnit) with a ctx check per block.
func trtriUpper(ctx context.Context, a []float64, n int) (bool, error) {
	impl := gonum.Implementation{}
	lda := n
	for i := 0; i < n; i++ {
		if a[i*lda+i] == 0 {
			return false, nil
		}
	}
	nb := impl.Ilaenv(1, "DTRTRI", "UD", n, -1, -1, -1)
	if nb <= 1 || nb > n {
		impl.Dtrti2(blas.Upper, blas.NonUnit, n, a, lda)
		return true, nil
	}
	bi := blas64.Implementation()
	for j := 0; j < n; j += nb {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		jb := min(nb, n-j)
		bi.Dtrmm(blas.Left, blas.Upper, blas.NoTrans, blas.NonUnit, j, jb, 1, a, lda, a[j:], lda)
		bi.Dtrsm(blas.Right, blas.Upper, blas.NoTrans, blas.NonUnit, j, jb, -1, a[j*lda+j:], lda, a[j:], lda)
		impl.Dtrti2(blas.Upper, blas.NonUnit, jb, a[j*lda+j:], lda)
	}
	return true, nil
}
