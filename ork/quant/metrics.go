package quant

import (
	"fmt"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// HessianError returns tr((W-Q)·H·(W-Q)ᵀ) for the float weight m and its quantized q, with H
// the Hessian of m's (unrotated) input: the expected squared output error of q on activations
// with second moment H. A rotated q is mapped back to the original space first (dropping the
// padding, which zero-padded activations never see).
func HessianError(m Matrix, q *Weight, h *Hessian) (float64, error) {
	if q.N != m.Rows || q.K != m.Cols || h.K != m.Cols || len(h.Data) != h.K*h.K || len(m.Data) != m.Rows*m.Cols {
		return 0, fmt.Errorf("%s: hessian error: weight %dx%d, quantized %dx%d, Hessian K=%d: %w", m.Name, m.Rows, m.Cols, q.N, q.K, h.K, ErrShape)
	}
	deq := q.Dequantize()
	if !q.Rotation.IsZero() {
		back := make([]float32, q.N*q.K)
		if err := q.Rotation.Inverse(back, deq, q.N); err != nil {
			return 0, fmt.Errorf("%s: %w", m.Name, err)
		}
		deq = back
	}
	k := m.Cols
	e := make([]float64, q.N*k)
	for i := range e {
		e[i] = float64(m.Data[i]) - float64(deq[i])
	}
	// EH = E·H (N x K), then Σ EH ∘ E.
	eh := make([]float64, q.N*k)
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1,
		blas64.General{Rows: q.N, Cols: k, Stride: k, Data: e},
		blas64.General{Rows: k, Cols: k, Stride: k, Data: h.Data},
		0, blas64.General{Rows: q.N, Cols: k, Stride: k, Data: eh})
	tr := 0.0
	for i, v := range e {
		tr += v * eh[i]
	}
	return tr, nil
}
