package quant

import (
	"fmt"

	"gonum.org/v1/gonum/mat"
)

// inverseCholeskyUpper damps H (percdamp·mean(diag) on the diagonal), inverts it through its
// Cholesky factor and returns the upper Cholesky factor U of H⁻¹ (H⁻¹ = UᵀU), row-major k x k,
// and the percdamp that worked. A failed factorisation is retried with percdamp raised by the
// configured step, up to the configured number of tries. H is not modified.
func inverseCholeskyUpper(H []float64, k int, c *config) ([]float64, float64, error) {
	mean := 0.0
	for i := 0; i < k; i++ {
		mean += H[i*k+i]
	}
	mean /= float64(k)
	work := make([]float64, k*k)
	pd := c.percDamp
	var lastErr error
	for try := 0; try < c.dampTries; try, pd = try+1, pd+c.dampStep {
		copy(work, H)
		damp := pd * mean
		for i := 0; i < k; i++ {
			work[i*k+i] += damp
		}
		U, err := invCholUpper(work, k)
		if err == nil {
			return U, pd, nil
		}
		lastErr = err
	}
	return nil, 0, fmt.Errorf("%w after %d tries up to percdamp %.4g (mean diag %.4g): %v", ErrCholesky, c.dampTries, pd-c.dampStep, mean, lastErr)
}

// invCholUpper returns the upper Cholesky factor of A⁻¹ for symmetric positive definite A (its
// upper triangle is read). A's storage is reused for the result, so at most about four k x k
// matrices are alive at once (A, the factor, the inverse, the second factor).
func invCholUpper(a []float64, k int) ([]float64, error) {
	var ch mat.Cholesky
	if ok := ch.Factorize(mat.NewSymDense(k, a)); !ok {
		return nil, fmt.Errorf("H + damp·I is not positive definite")
	}
	var inv mat.SymDense
	if err := ch.InverseTo(&inv); err != nil {
		return nil, fmt.Errorf("inverting H: %v", err)
	}
	ch.Reset()
	var ch2 mat.Cholesky
	if ok := ch2.Factorize(&inv); !ok {
		return nil, fmt.Errorf("H⁻¹ is not positive definite")
	}
	inv.Reset()
	var u *mat.TriDense
	if t, ok := ch2.RawU().(*mat.TriDense); ok {
		u = t // gonum's own storage: no copy
	} else {
		u = &mat.TriDense{}
		ch2.UTo(u)
	}
	raw := u.RawTriangular()
	out := a
	for i := 0; i < k; i++ {
		row := out[i*k : (i+1)*k]
		clear(row[:i])
		copy(row[i:], raw.Data[i*raw.Stride+i:i*raw.Stride+k])
	}
	for i, v := range out {
		if v != v { // NaN from a numerically broken factor
			return nil, fmt.Errorf("factor of H⁻¹ has NaN at (%d,%d)", i/k, i%k)
		}
	}
	return out, nil
}
