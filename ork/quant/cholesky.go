package quant

import (
	"context"
	"fmt"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack"
	"gonum.org/v1/gonum/lapack/gonum"
)

// conditionTolerance is gonum/mat's: a factor whose condition estimate exceeds it is rejected
// (as mat.Cholesky.InverseTo does), which makes GPTQ raise the damping.
const conditionTolerance = 1e16

// inverseCholeskyUpper damps the symmetric k x k matrix a (percdamp·mean(diag) on the diagonal),
// inverts it through its Cholesky factor and leaves in a, IN PLACE, the upper Cholesky factor U
// of (H + damp·I)⁻¹ (row-major, H⁻¹ = UᵀU, strict lower triangle zeroed). It returns the
// percdamp that worked. No k x k copy is made: every factorisation step (dpotrf, dpotri =
// dtrtri + dlauum, dpotrf again) reads and writes only the upper triangle, so the strict lower
// triangle keeps H, and a failed try restores the upper triangle from it (plus a saved
// diagonal) before retrying with percdamp raised by the configured step. ctx is checked between
// the 64-wide blocks of every factorisation; on cancellation a holds garbage.
func inverseCholeskyUpper(ctx context.Context, a []float64, k int, c *config) (float64, error) {
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
		err := invCholUpper(ctx, a, k)
		if err == nil {
			for i := 0; i < k; i++ {
				clear(a[i*k : i*k+i])
			}
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
// positive definite), pocon (reciprocal condition estimate of the factor, given H's 1-norm),
// trtri (inverse of the factor, false if singular) and lauum (U·Uᵀ). The pure-Go build uses
// gonumSteps; -tags blas installs OpenBLAS's LAPACK (blas.go).
type factorSteps struct {
	potrf func(ctx context.Context, a []float64, n int) (bool, error)
	pocon func(a []float64, n int, anorm float64) (float64, error)
	trtri func(ctx context.Context, a []float64, n int) (bool, error)
	lauum func(ctx context.Context, a []float64, n int) error
}

// gonumSteps are gonum's blocked LAPACK algorithms re-implemented with a ctx check per block.
var gonumSteps = factorSteps{potrf: potrfUpper, trtri: trtriUpper, lauum: lauumUpper,
	pocon: func(a []float64, n int, anorm float64) (float64, error) {
		return gonum.Implementation{}.Dpocon(blas.Upper, n, a, n, anorm, make([]float64, 3*n), make([]int, n)), nil
	}}

// steps is the factorisation backend of this build.
var steps = gonumSteps

// invCholUpper overwrites the upper triangle of the row-major symmetric positive definite a with
// the upper Cholesky factor of A⁻¹, touching nothing below the diagonal: Cholesky (potrf), a
// condition check, the inverse (potri = trtri + lauum) and Cholesky again. The pure-Go build runs
// gonum's blocked algorithms (same block size and call order as gonum/mat's Cholesky, InverseTo,
// Cholesky, so the result is bit-identical to those) with a ctx check per block; the -tags blas
// build runs OpenBLAS's dpotrf/dtrtri/dlauum (parallel) with a ctx check between the steps, each
// about a quarter of the K³ work (timings: docs/performance.md).
func invCholUpper(ctx context.Context, a []float64, k int) error {
	if k == 0 {
		return nil
	}
	if len(a) != k*k {
		return fmt.Errorf("factorisation of %d values as %d x %d", len(a), k, k)
	}
	anorm := gonum.Implementation{}.Dlansy(lapack.MaxRowSum, blas.Upper, k, a, k, make([]float64, k))
	if ok, err := steps.potrf(ctx, a, k); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("H + damp·I is not positive definite")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if rc, err := steps.pocon(a, k, anorm); err != nil {
		return err
	} else if 1/rc > conditionTolerance {
		return fmt.Errorf("H + damp·I is ill-conditioned (condition ~%.3g)", 1/rc)
	}
	if ok, err := steps.trtri(ctx, a, k); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("inverting H: singular factor")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := steps.lauum(ctx, a, k); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if ok, err := steps.potrf(ctx, a, k); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("H⁻¹ is not positive definite")
	}
	for i := 0; i < k; i++ {
		for j := i; j < k; j++ {
			if v := a[i*k+j]; v != v { // NaN from a numerically broken factor
				return fmt.Errorf("factor of H⁻¹ has NaN at (%d,%d)", i, j)
			}
		}
	}
	return nil
}

// potrfUpper is gonum's Dpotrf(Upper) with a ctx check per block.
func potrfUpper(ctx context.Context, a []float64, n int) (bool, error) {
	impl := gonum.Implementation{}
	lda := n
	nb := impl.Ilaenv(1, "DPOTRF", "U", n, -1, -1, -1)
	if nb <= 1 || n <= nb {
		return impl.Dpotf2(blas.Upper, n, a, lda), nil
	}
	bi := blas64.Implementation()
	for j := 0; j < n; j += nb {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		jb := min(nb, n-j)
		bi.Dsyrk(blas.Upper, blas.Trans, jb, j, -1, a[j:], lda, 1, a[j*lda+j:], lda)
		if !impl.Dpotf2(blas.Upper, jb, a[j*lda+j:], lda) {
			return false, nil
		}
		if j+jb < n {
			bi.Dgemm(blas.Trans, blas.NoTrans, jb, n-j-jb, j, -1, a[j:], lda, a[j+jb:], lda, 1, a[j*lda+j+jb:], lda)
			bi.Dtrsm(blas.Left, blas.Upper, blas.Trans, blas.NonUnit, jb, n-j-jb, 1, a[j*lda+j:], lda, a[j*lda+j+jb:], lda)
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

// lauumUpper is gonum's Dlauum(Upper) (U·Uᵀ in the upper triangle) with a ctx check per block.
func lauumUpper(ctx context.Context, a []float64, n int) error {
	impl := gonum.Implementation{}
	lda := n
	nb := impl.Ilaenv(1, "DLAUUM", "U", n, -1, -1, -1)
	if nb <= 1 || n <= nb {
		impl.Dlauu2(blas.Upper, n, a, lda)
		return nil
	}
	bi := blas64.Implementation()
	for i := 0; i < n; i += nb {
		if err := ctx.Err(); err != nil {
			return err
		}
		ib := min(nb, n-i)
		bi.Dtrmm(blas.Right, blas.Upper, blas.Trans, blas.NonUnit, i, ib, 1, a[i*lda+i:], lda, a[i:], lda)
		impl.Dlauu2(blas.Upper, ib, a[i*lda+i:], lda)
		if n-i-ib > 0 {
			bi.Dgemm(blas.NoTrans, blas.Trans, i, ib, n-i-ib, 1, a[i+ib:], lda, a[i*lda+i+ib:], lda, 1, a[i:], lda)
			bi.Dsyrk(blas.Upper, blas.NoTrans, ib, n-i-ib, 1, a[i*lda+i+ib:], lda, 1, a[i*lda+i:], lda)
		}
	}
	return nil
}
