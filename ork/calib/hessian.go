package calib

import (
	"fmt"
	"math"
	"runtime"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// Hessian is Σ x·xᵀ over Tokens activation rows x of K values: float64, row-major K × K. It has the same
// fields as quant.Hessian, so quant.Hessian(*h) converts it.
type Hessian struct {
	K      int
	Data   []float64
	Tokens int64
}

// Empty reports whether no activation row was accumulated (Tokens = 0): the matrix is all zeros and
// carries no information (an MoE expert no calibration token was routed to).
func (h *Hessian) Empty() bool { return h.Tokens == 0 }

// NewHessian returns an empty K × K Hessian.
func NewHessian(k int) *Hessian { return &Hessian{K: k, Data: make([]float64, k*k)} }

// accumulator adds rows into the upper triangle of a Hessian; Symmetrize completes it.
type accumulator struct {
	h   *Hessian
	x64 *[]float64 // conversion buffer, shared by the accumulators of one window
}

// stripe is the number of H rows one Gemm call updates; the diagonal block is computed whole, so a
// stripe wastes stripe²/2 multiply-adds per token.
const stripe = 256

// add accumulates the len(x)/K rows of x into the upper triangle (and the diagonal) of H:
// H[i][j] += Σ_t x[t][i]·x[t][j] for j >= i, in float64, striped so that each Gemm touches only rows
// [r0, r1) and columns [r0, K) (gonum's Gemm runs its blocks in parallel).
func (a *accumulator) add(x []float32) error {
	k := a.h.K
	if len(x)%k != 0 {
		return fmt.Errorf("hessian K=%d: %d values are not whole rows: %w", k, len(x), ErrShape)
	}
	t := len(x) / k
	if t == 0 {
		return nil
	}
	if a.x64 == nil {
		a.x64 = new([]float64)
	}
	if cap(*a.x64) < len(x) {
		*a.x64 = make([]float64, len(x))
	}
	x64 := (*a.x64)[:len(x)]
	for i, v := range x {
		x64[i] = float64(v)
	}
	for r0 := 0; r0 < k; r0 += stripe {
		r1 := min(r0+stripe, k)
		av := blas64.General{Rows: t, Cols: r1 - r0, Stride: k, Data: x64[r0:]}
		bv := blas64.General{Rows: t, Cols: k - r0, Stride: k, Data: x64[r0:]}
		cv := blas64.General{Rows: r1 - r0, Cols: k - r0, Stride: k, Data: a.h.Data[r0*k+r0:]}
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, av, bv, 1, cv)
	}
	a.h.Tokens += int64(t)
	return nil
}

// Symmetrize copies the upper triangle into the lower one.
func (h *Hessian) Symmetrize() {
	k := h.K
	parallelFor(k, func(i int) {
		for j := i + 1; j < k; j++ {
			h.Data[j*k+i] = h.Data[i*k+j]
		}
	})
}

// Add accumulates the rows of x (T rows of K values) into h and keeps it symmetric. Capture uses the
// faster upper-triangle path and symmetrizes once at the end.
func (h *Hessian) Add(x []float32) error {
	a := accumulator{h: h}
	if err := a.add(x); err != nil {
		return err
	}
	h.Symmetrize()
	return nil
}

// Check verifies the size, that every value is finite and that the matrix is exactly symmetric with a
// non-negative diagonal (a necessary condition for positive semi-definiteness).
func (h *Hessian) Check() error {
	if h.K <= 0 || len(h.Data) != h.K*h.K {
		return fmt.Errorf("hessian K=%d with %d values (want K²): %w", h.K, len(h.Data), ErrShape)
	}
	if h.Tokens < 0 {
		return fmt.Errorf("hessian tokens %d: %w", h.Tokens, ErrShape)
	}
	k := h.K
	for i := 0; i < k; i++ {
		if d := h.Data[i*k+i]; d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
			return fmt.Errorf("hessian diagonal (%d,%d) = %v: %w", i, i, d, ErrNotFinite)
		}
		for j := i + 1; j < k; j++ {
			a, b := h.Data[i*k+j], h.Data[j*k+i]
			if math.IsNaN(a) || math.IsInf(a, 0) || a != b {
				return fmt.Errorf("hessian at (%d,%d) = %v, (%d,%d) = %v: %w", i, j, a, j, i, b, ErrNotFinite)
			}
		}
	}
	return nil
}

// Diag returns the diagonal of h (the sums of squared activations per input channel).
func (h *Hessian) Diag() []float64 {
	d := make([]float64, h.K)
	for i := range d {
		d[i] = h.Data[i*h.K+i]
	}
	return d
}

// parallelFor runs f(i) for i in [0, n) over GOMAXPROCS goroutines in interleaved order.
func parallelFor(n int, f func(i int)) {
	w := max(1, min(n, runtime.GOMAXPROCS(0)))
	done := make(chan struct{}, w)
	for g := 0; g < w; g++ {
		go func() {
			for i := g; i < n; i += w {
				f(i)
			}
			done <- struct{}{}
		}()
	}
	for g := 0; g < w; g++ {
		<-done
	}
}
