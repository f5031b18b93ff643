package calib

import (
	"runtime"
	"sync"
)

// Blocks of gramStripe: gramTokens tokens at a time (rows of x), gramCols columns per worker task, so
// that a block's values of x stay in cache while the stripe's rows pass.
const (
	gramTokens = 128
	gramCols   = 64
)

// gramStripe adds x[:, r0:r1]ᵀ·x[:, r0:k] (x: t rows of k) to rows [r0, r1) × columns [r0, k) of the
// k × k row-major c exactly as gonum's Dgemm(Trans, NoTrans, 1, ·, ·, 1, ·) does: every value adds its
// products x[l][i]·x[l][j] in token order l, each product rounded before it is added, skipping a zero
// x[l][i] — on both of gonum's paths (it accumulates each value in place over its K slices in order).
// 4×8 tiles run gramTile4x8; the rows and columns beyond whole tiles the same sums in Go. Column blocks
// go to GOMAXPROCS workers; tokens go in blocks, each value's sum still in token order.
func gramStripe(c []float64, k int, x []float64, t, r0, r1 int) {
	cols := k - r0
	blocks := (cols + gramCols - 1) / gramCols
	workers := min(blocks, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l0 := 0; l0 < t; l0 += gramTokens {
				l1 := min(l0+gramTokens, t)
				for b := w; b < blocks; b += workers {
					c0 := r0 + b*gramCols
					gramBlock(c, k, x, l0, l1, r0, r1, c0, min(c0+gramCols, k))
				}
			}
		}()
	}
	wg.Wait()
}

// gramBlock adds tokens [l0, l1) to rows [r0, r1) × columns [c0, c1) of c.
func gramBlock(c []float64, k int, x []float64, l0, l1, r0, r1, c0, c1 int) {
	i4, j8 := r0, c0
	if hasGramKernel {
		i4, j8 = r0+(r1-r0)&^3, c0+(c1-c0)&^7
		for i := r0; i < i4; i += 4 {
			for j := c0; j < j8; j += 8 {
				gramTile4x8(&x[l0*k+i], &x[l0*k+j], k, l1-l0, &c[i*k+j], k)
			}
		}
	}
	gramGo(c, k, x, l0, l1, r0, i4, j8, c1)
	gramGo(c, k, x, l0, l1, i4, r1, c0, c1)
}

// gramGo is gramBlock's sums in Go for rows [r0, r1) × columns [c0, c1).
func gramGo(c []float64, k int, x []float64, l0, l1, r0, r1, c0, c1 int) {
	for i := r0; i < r1; i++ {
		ci := c[i*k : i*k+c1]
		for l := l0; l < l1; l++ {
			a := x[l*k+i]
			if a == 0 {
				continue
			}
			xl := x[l*k : l*k+c1]
			for j := c0; j < c1; j++ {
				ci[j] += float64(a * xl[j])
			}
		}
	}
}
