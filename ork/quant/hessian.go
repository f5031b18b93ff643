package quant

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/ork/internal/parallel"
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
	// Tiles of validTile x validTile, so that the column-strided reads of the mirror stay in cache,
	// their bands of rows on every core; only when a tile holds a bad pair is the matrix scanned row
	// by row, for the first bad pair in row order (the one the error names).
	k := h.K
	var bad atomic.Bool
	parallel.For((k+validTile-1)/validTile, runtime.GOMAXPROCS(0), func(b int) {
		i0 := b * validTile
		for j0 := i0; j0 < k && !bad.Load(); j0 += validTile {
			for i := i0; i < min(i0+validTile, k); i++ {
				for j := max(j0, i); j < min(j0+validTile, k); j++ {
					if !validPair(h.Data[i*k+j], h.Data[j*k+i]) {
						bad.Store(true)
						return
					}
				}
			}
		}
	})
	if bad.Load() {
		return h.firstInvalid()
	}
	return nil
}

// validTile is the side of the tiles Validate checks.
const validTile = 64

// validPair reports whether a = H[i][j] and b = H[j][i] are finite and equal to 1e-9 relative.
func validPair(a, b float64) bool {
	return a-a == 0 && b-b == 0 && (a == b || math.Abs(a-b) <= 1e-9*(math.Abs(a)+math.Abs(b)))
}

// firstInvalid scans h row by row and returns the error for its first pair Validate refuses.
func (h *Hessian) firstInvalid() error {
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
