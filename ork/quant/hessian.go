package quant

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// Hessian is the GPTQ proxy Hessian of one weight: Data = Σ x·xᵀ (float64, row-major K x K,
// symmetric) over Tokens activation rows x of K values. It is unnormalised; GPTQ is invariant
// to its scale. ork/calib accumulates it; NewHessian and Add do the same here.
type Hessian struct {
	K      int
	Data   []float64
	Tokens int64
}

// NewHessian returns an empty K x K Hessian.
func NewHessian(k int) *Hessian { return &Hessian{K: k, Data: make([]float64, k*k)} }

// Add accumulates the rows of x (rows x K, row-major float32) into h: Data += xᵀ·x.
func (h *Hessian) Add(x []float32, rows int) error {
	if rows < 0 || len(x) != rows*h.K || len(h.Data) != h.K*h.K {
		return fmt.Errorf("hessian add: %d values for %d rows of K=%d: %w", len(x), rows, h.K, ErrShape)
	}
	if rows == 0 {
		return nil
	}
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	a := blas64.General{Rows: rows, Cols: h.K, Stride: h.K, Data: x64}
	c := blas64.Symmetric{Uplo: blas.Upper, N: h.K, Stride: h.K, Data: h.Data}
	// Syrk updates only the upper triangle; mirror it into the lower one afterwards.
	blas64.Syrk(blas.Trans, 1, a, 1, c)
	for i := 0; i < h.K; i++ {
		for j := i + 1; j < h.K; j++ {
			h.Data[j*h.K+i] = h.Data[i*h.K+j]
		}
	}
	h.Tokens += int64(rows)
	return nil
}

// Validate checks the size, finiteness and symmetry of h.
func (h *Hessian) Validate() error {
	if h.K <= 0 || len(h.Data) != h.K*h.K {
		return fmt.Errorf("hessian K=%d with %d values: %w (want K*K)", h.K, len(h.Data), ErrShape)
	}
	for i := 0; i < h.K; i++ {
		for j := i; j < h.K; j++ {
			a, b := h.Data[i*h.K+j], h.Data[j*h.K+i]
			if math.IsNaN(a) || math.IsInf(a, 0) || math.IsNaN(b) || math.IsInf(b, 0) {
				return fmt.Errorf("hessian value at (%d,%d): %w", i, j, ErrNotFinite)
			}
			if a != b && math.Abs(a-b) > 1e-9*(math.Abs(a)+math.Abs(b)) {
				return fmt.Errorf("hessian not symmetric at (%d,%d): %v vs %v: %w", i, j, a, b, ErrShape)
			}
		}
	}
	return nil
}

// Diag returns a copy of the diagonal of h.
func (h *Hessian) Diag() []float64 {
	d := make([]float64, h.K)
	for i := range d {
		d[i] = h.Data[i*h.K+i]
	}
	return d
}
