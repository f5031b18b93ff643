package model

import (
	"fmt"
	"runtime"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/internal/sgemm"
	"orkpipe/ork/quant"
)

// Linear is one matrix product y = W·x + b of the network, with W of N rows (outputs) by K values
// (inputs). Implementations: [Dense] (float32 weights) and, for evaluation, the board's emulated integer
// arithmetic.
type Linear interface {
	// Dims returns N (outputs) and K (inputs).
	Dims() (n, k int)
	// Apply computes y[t*N+i] = sum_j W[i][j]·x[t*K+j] (+ bias[i]) for the T = len(x)/K tokens in x.
	// len(x) must be a multiple of K and len(y) = T·N. Apply may run goroutines but returns only when
	// y is complete; it must not retain x or y.
	Apply(y, x []float32) error
}

// Dense is a float32 Linear: W is N rows of K values, row-major; Bias is nil or N values.
type Dense struct {
	N, K    int
	W, Bias []float32
}

// NewDense checks the sizes and returns a Dense.
func NewDense(n, k int, w, bias []float32) (*Dense, error) {
	if n <= 0 || k <= 0 || len(w) != n*k {
		return nil, fmt.Errorf("dense %dx%d: %d weights: %w", n, k, len(w), ErrBadModel)
	}
	if bias != nil && len(bias) != n {
		return nil, fmt.Errorf("dense %dx%d: bias of %d values: %w", n, k, len(bias), ErrBadModel)
	}
	return &Dense{N: n, K: k, W: w, Bias: bias}, nil
}

// Dims implements Linear.
func (d *Dense) Dims() (int, int) { return d.N, d.K }

// Apply implements Linear as one float32 matrix product Y = X·Wᵀ (gonum's blocked, parallel Sgemm, or
// OpenBLAS's threads), or one product per panel of rows on GOMAXPROCS workers while OpenBLAS runs each
// call on one thread (quant.BLASSingleThreaded).
func (d *Dense) Apply(y, x []float32) error {
	n, k := d.N, d.K
	if err := checkApply(y, x, n, k); err != nil {
		return err
	}
	t := len(x) / k
	if t == 0 {
		return nil
	}
	gemm := func(r0, r1 int) {
		xm := blas32.General{Rows: t, Cols: k, Stride: k, Data: x}
		wm := blas32.General{Rows: r1 - r0, Cols: k, Stride: k, Data: d.W[r0*k:]}
		ym := blas32.General{Rows: t, Cols: r1 - r0, Stride: n, Data: y[r0:]}
		gemmNT(xm, wm, 0, ym)
	}
	if !gonumSgemm() && quant.BLASSingleThreaded() {
		// OpenBLAS on one thread (the calibrate node's scope): the rows' panels on every core instead.
		rows := panelRows(n, k)
		parallel.For(ceilDiv(n, rows), runtime.GOMAXPROCS(0), func(p int) { gemm(p*rows, min(p*rows+rows, n)) })
	} else {
		gemm(0, n)
	}
	if d.Bias != nil {
		for r := 0; r < t; r++ {
			row := y[r*n : (r+1)*n]
			for i, b := range d.Bias {
				row[i] += b
			}
		}
	}
	return nil
}

// gemmNT sets y = x·wᵀ (beta 0) or adds it to y (beta 1). The pure-Go build multiplies with sgemm.NT,
// whose AVX2 kernels sum every output exactly as gonum's Sgemm does (the order Encoded reproduces and
// every pure-Go result has had); a -tags blas build with blas32, that is OpenBLAS.
func gemmNT(x, w blas32.General, beta float32, y blas32.General) {
	if gonumSgemm() {
		sgemm.NT(x.Rows, w.Rows, x.Cols, x.Data, x.Stride, w.Data, w.Stride, beta, y.Data, y.Stride)
		return
	}
	blas32.Gemm(blas.NoTrans, blas.Trans, 1, x, w, beta, y)
}

// MatMulNT sets y = x·wᵀ for t rows of x (k values each) and n rows of w, all row-major, with the
// float32 product every Linear of this package runs (sgemm.NT in the pure-Go build, OpenBLAS's sgemm
// under -tags blas): the reference rate benchmarks compare the stages with.
func MatMulNT(y, x, w []float32, t, n, k int) {
	gemmNT(blas32.General{Rows: t, Cols: k, Stride: k, Data: x}, blas32.General{Rows: n, Cols: k, Stride: k, Data: w},
		0, blas32.General{Rows: t, Cols: n, Stride: n, Data: y})
}

func checkApply(y, x []float32, n, k int) error {
	if len(x)%k != 0 || len(y) != len(x)/k*n {
		return fmt.Errorf("linear %dx%d: x has %d values, y %d: %w", n, k, len(x), len(y), ErrBadModel)
	}
	return nil
}

// parallelRows splits [0, n) into contiguous blocks over up to workers goroutines (0: GOMAXPROCS) when
// the work (multiply-adds) is large enough to pay for them.
func parallelRows(n, work, workers int, f func(r0, r1 int)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if work < 1<<16 || workers == 1 || n < 2 {
		f(0, n)
		return
	}
	workers = min(workers, n)
	parallel.Split(n, (n+workers-1)/workers, f)
}

// dot is a float32 dot product with four independent accumulators.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
