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
	// Eᵀ (K x N), so that the panels of EᵀE are products of rows (faster in both BLAS backends)
	k, n := m.Cols, q.N
	et := make([]float64, k*n)
	const tile = 64
	for r0 := 0; r0 < n; r0 += tile {
		for c0 := 0; c0 < k; c0 += tile {
			for r := r0; r < min(r0+tile, n); r++ {
				for c := c0; c < min(c0+tile, k); c++ {
					et[c*n+r] = float64(m.Data[r*k+c]) - float64(deq[r*k+c])
				}
			}
		}
	}
	return traceEHE(et, n, k, h.Data), nil
}

// errorPanel is the width of the column panels of EᵀE that traceEHE forms at a time.
const errorPanel = 512

// traceEHE returns tr(E·H·Eᵀ) for E (n x k), given as its transpose et (k x n), and a symmetric H
// (k x k), both row-major, as Σ_ij H_ij·(EᵀE)_ij: EᵀE is symmetric too, so only its lower part is
// formed, a panel of errorPanel columns at a time ((EᵀE)[a:, a:b] = Eᵀ[a:]·Eᵀ[a:b]ᵀ); the
// panels' diagonal blocks count once and the part below them twice. That is n·k² flops and a
// k x errorPanel buffer, half the flops of forming E·H.
func traceEHE(et []float64, n, k int, h []float64) float64 {
	pw := min(k, errorPanel)
	panel := make([]float64, k*pw)
	tr := 0.0
	for a := 0; a < k; a += pw {
		b := min(a+pw, k)
		rows, cols := k-a, b-a
		g := blas64.General{Rows: rows, Cols: cols, Stride: cols, Data: panel[:rows*cols]}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1,
			blas64.General{Rows: rows, Cols: n, Stride: n, Data: et[a*n:]},
			blas64.General{Rows: cols, Cols: n, Stride: n, Data: et[a*n:]},
			0, g)
		for i := 0; i < rows; i++ {
			hr := h[(a+i)*k+a : (a+i)*k+b]
			s := 0.0
			for j, v := range panel[i*cols : (i+1)*cols] {
				s += hr[j] * v
			}
			if i >= cols {
				s *= 2
			}
			tr += s
		}
	}
	return tr
}
