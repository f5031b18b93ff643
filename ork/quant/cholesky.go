package quant

import "fmt"

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
