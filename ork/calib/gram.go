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
// k × k row-major c: syrkUpper's stripe, gramRect's sums.
func gramStripe(c []float64, k int, x []float64, t, r0, r1 int) {
	gramRect(c[r0*k+r0:], k, x, k, t, r0, r1, r0, k)
}

// gramRect adds x[:, r0:r1]ᵀ·x[:, c0:c1] (x: t rows, ldx apart) to the (r1-r0) × (c1-c0) values at c
// (rows ldc apart) exactly as gonum's Dgemm(Trans, NoTrans, 1, ·, ·, 1, ·) does: every value adds its
// products x[l][i]·x[l][j] in token order l, each product rounded before it is added, skipping a zero
// x[l][i] — on both of gonum's paths (it accumulates each value in place over its K slices in order).
// So gonum's Dgemm with beta 0 is c zeroed, then gramRect. Tiles run gramTile8x16 (AVX-512) and
// gramTile4x8 (AVX2); the rows and columns beyond whole tiles the same sums in Go. Column blocks go to GOMAXPROCS workers; tokens go in
// blocks, each value's sum still in token order.
func gramRect(c []float64, ldc int, x []float64, ldx, t, r0, r1, c0, c1 int) {
	blocks := (c1 - c0 + gramCols - 1) / gramCols
	workers := min(blocks, runtime.GOMAXPROCS(0))
	g := gram{c: c, ldc: ldc, x: x, ldx: ldx, r0: r0, c0: c0}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l0 := 0; l0 < t; l0 += gramTokens {
				l1 := min(l0+gramTokens, t)
				for b := w; b < blocks; b += workers {
					b0 := c0 + b*gramCols
					g.block(l0, l1, r0, r1, b0, min(b0+gramCols, c1))
				}
			}
		}()
	}
	wg.Wait()
}

// gram is one gramRect: value (i, j) of the product is c[(i-r0)·ldc + j-c0]; token l's value of
// column i is x[l·ldx + i].
type gram struct {
	c      []float64
	ldc    int
	x      []float64
	ldx    int
	r0, c0 int
}

// block adds tokens [l0, l1) to rows [r0, r1) × columns [c0, c1): whole 8×16 tiles on AVX-512, then
// what is left in 4×8 tiles on AVX2, then what is left of that in Go — each value the same sum.
func (g *gram) block(l0, l1, r0, r1, c0, c1 int) {
	if hasGramKernel && hasGram512 {
		i8, j16 := r0+(r1-r0)&^7, c0+(c1-c0)&^15
		for i := r0; i < i8; i += 8 {
			for j := c0; j < j16; j += 16 {
				gramTile8x16(&g.x[l0*g.ldx+i], &g.x[l0*g.ldx+j], g.ldx, l1-l0, &g.c[(i-g.r0)*g.ldc+j-g.c0], g.ldc)
			}
		}
		g.block4(l0, l1, r0, i8, j16, c1)
		g.block4(l0, l1, i8, r1, c0, c1)
		return
	}
	g.block4(l0, l1, r0, r1, c0, c1)
}

// block4 is block in 4×8 tiles on AVX2 and the rest in Go.
func (g *gram) block4(l0, l1, r0, r1, c0, c1 int) {
	if r0 >= r1 || c0 >= c1 {
		return
	}
	i4, j8 := r0, c0
	if hasGramKernel {
		i4, j8 = r0+(r1-r0)&^3, c0+(c1-c0)&^7
		for i := r0; i < i4; i += 4 {
			for j := c0; j < j8; j += 8 {
				gramTile4x8(&g.x[l0*g.ldx+i], &g.x[l0*g.ldx+j], g.ldx, l1-l0, &g.c[(i-g.r0)*g.ldc+j-g.c0], g.ldc)
			}
		}
	}
	g.sums(l0, l1, r0, i4, j8, c1)
	g.sums(l0, l1, i4, r1, c0, c1)
}

// sums is block's sums in Go for rows [r0, r1) × columns [c0, c1).
func (g *gram) sums(l0, l1, r0, r1, c0, c1 int) {
	if c0 >= c1 {
		return
	}
	for i := r0; i < r1; i++ {
		at := (i-g.r0)*g.ldc - g.c0
		ci := g.c[at+c0 : at+c1]
		for l := l0; l < l1; l++ {
			a := g.x[l*g.ldx+i]
			if a == 0 {
				continue
			}
			xl := g.x[l*g.ldx+c0 : l*g.ldx+c1]
			for j := range ci {
				ci[j] += float64(a * xl[j])
			}
		}
	}
}
