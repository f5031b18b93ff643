package quant

import (
	"context"
	"fmt"
	"math"
)

// RTNImportance quantizes m (N x K) like RTN with a diagonal Hessian: importance[k] (K values,
// finite, >= 0, not all zero) weights column k in the clip search and in QErr, which is then
// sqrt(Σ d_k (W-Q)² / Σ d_k W²). This is llama-quantize's use of an imatrix (importance = mean x²
// of input channel k over the calibration tokens); it needs no K x K matrix, so it costs the same
// memory as plain RTN.
//
// A rotation option is refused (ErrParam): the diagonal of the rotated Hessian R·H·Rᵀ depends on
// the off-diagonal terms of H, which an importance vector does not have.
func RTNImportance(ctx context.Context, m Matrix, importance []float64, opts ...Option) (*Weight, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if c.rotate {
		return nil, fmt.Errorf("%s: importance weighting with a rotation: the rotated diag(H) needs off-diagonal terms: %w", m.Name, ErrParam)
	}
	if err := checkImportance(m.Name, importance, m.Cols); err != nil {
		return nil, err
	}
	w, data, err := prepare(m, c)
	if err != nil {
		return nil, err
	}
	if err := rtnRows(ctx, w, matrixRows(data, w.KP), importance, c, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	return w, nil
}

// checkImportance checks an importance vector for a weight of k columns: k values, finite, >= 0,
// not all zero.
func checkImportance(name string, importance []float64, k int) error {
	if len(importance) != k {
		return fmt.Errorf("%s: %d importance values, weight has K=%d: %w", name, len(importance), k, ErrShape)
	}
	sum := 0.0
	for i, v := range importance {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%s: importance[%d] = %v, want finite and >= 0: %w", name, i, v, ErrNotFinite)
		}
		sum += v
	}
	if sum == 0 {
		return fmt.Errorf("%s: every importance value is 0 (no calibration activation reached this weight), nothing to weight by: %w", name, ErrParam)
	}
	return nil
}
