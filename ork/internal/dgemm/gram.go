package dgemm

import (
	"fmt"
	"runtime"

	"gonum.org/v1/gonum/blas"

	"orkpipe/ork/internal/parallel"
)

// The Gram update C += XᵀX of calibration's Hessians (X: a batch of activation rows). As stripes of
// Dgemm calls it packed its operands once per stripe: A's rows, and every work item's block of B,
// copied from X again for each stripe right of it (a 17408-wide batch's B blocks 68 times over).
// GramUpper packs each pass of X once, in A's layout — tiles of 8 columns, a tile's values token
// after token — and reads B's 16 columns of a kernel call from two such tiles (tile8x16's bhi), so
// that one copy of the batch serves both operands of every product over the triangle.

// Work items of GramUpper: gramRows rows of C (whole row tiles, so that a band's packed A stays in
// L2/L3 while its column blocks pass) by blockCols columns.
const gramRows = 256

// GramScratch is the number of values GramUpper packs a pass of t tokens of an n-wide X into: the
// columns of X's whole 16-column tiles, min(t, packK) tokens each.
func GramScratch(n, t int) int { return (n &^ 15) * min(t, packK) }

// GramUpper adds XᵀX to the upper triangle of C: for every i <= j, c[i·ldc+j] += x[l·ldx+i]·x[l·ldx+j]
// for l = 0..t-1 in order, skipping the product where x[l·ldx+i] is zero — the values, bit for bit,
// that gonum's Dgemm(Trans, NoTrans, 1, X, X, 1, C) and Dsyrk(Upper, Trans, 1, X, 1, C) give (the
// package doc's order of the sums). X is t rows of n values (row stride ldx), C n × n (row stride
// ldc); C's strict lower triangle is neither read nor written. scratch holds the packed passes
// (GramScratch(n, t) values; a shorter one is replaced by a pooled buffer); its values are
// overwritten. It runs on GOMAXPROCS goroutines.
//
// The triangle's whole 16-column tiles run over X packed a pass of packK tokens at a time, on
// tile8x16 (AVX-512) or four tile4x8 calls a tile (AVX2); the tiles the diagonal crosses on a copy
// of C's tile, of which only the values on and above the diagonal are written back; the columns
// beyond the last whole tile on block4's kernels and in Go. Without AVX2 it runs stripes of
// gramRows rows: Dsyrk on each diagonal block, Dgemm right of it (gonum's own).
func GramUpper(n, t int, x []float64, ldx int, c []float64, ldc int, scratch []float64) {
	if n < 0 || t < 0 || ldx < max(1, n) || ldc < max(1, n) {
		panic(fmt.Sprintf("dgemm: GramUpper n %d t %d ldx %d ldc %d", n, t, ldx, ldc))
	}
	if n == 0 || t == 0 {
		return
	}
	if len(x) < (t-1)*ldx+n || len(c) < (n-1)*ldc+n {
		panic(fmt.Sprintf("dgemm: GramUpper %d x %d: X has %d values, C %d", t, n, len(x), len(c)))
	}
	j16 := n &^ 15
	if !has4x8 || j16 == 0 {
		gramStripes(n, t, x, ldx, c, ldc)
		return
	}
	if need := GramScratch(n, t); len(scratch) < need {
		buf := getBuf(need)
		defer putBuf(buf)
		scratch = *buf
	}
	p := product{m: n, n: n, k: t, alpha: 1, a: x, ai: 1, al: ldx, b: x, ldb: ldx, c: c, ldc: ldc}
	workers := runtime.GOMAXPROCS(0)
	g := gram{p: &p, j16: j16, pa: scratch}
	for l0 := 0; l0 < t; l0 += packK {
		g.pass(workers, l0, min(l0+packK, t))
	}
	if j16 < n {
		// Rows [0, j16) × columns [j16, n): all above the diagonal, in place; then the triangle of
		// rows [j16, n), a row at a time.
		bands := (j16 + gramRows - 1) / gramRows
		parallel.For(bands, workers, func(b int) {
			p.block4(0, t, b*gramRows, min((b+1)*gramRows, j16), j16, n)
		})
		for r := j16; r < n; r++ {
			p.sums(0, t, r, r+1, r, n)
		}
	}
}

// gram is one GramUpper on the kernels: its product (X as both operands), the columns its
// whole 16-column tiles cover, and the packed pass (pa) with each 8-column tile's zero flag.
type gram struct {
	p     *product
	j16   int
	pa    []float64
	zeros []bool
}

// pass adds tokens [l0, l1) to the triangle's whole tiles: X's columns [0, j16) packed (tile after
// tile, a tile's 8 values token after token), then every work item's tiles over them.
func (g *gram) pass(workers, l0, l1 int) {
	p, tk := g.p, l1-l0
	tiles := g.j16 / 8
	if cap(g.zeros) < tiles {
		g.zeros = make([]bool, tiles)
	}
	g.zeros = g.zeros[:tiles]
	parallel.For(tiles, min(workers, max(1, g.j16*tk>>16)), func(tl int) {
		dst := g.pa[tl*8*tk : (tl+1)*8*tk]
		packTokens8(dst, p.a[tl*8+l0*p.al:], p.al, tk)
		g.zeros[tl] = !nonzero(dst, tk)
	})
	// Items band after band, each band's column blocks from the one holding its first row.
	type item struct{ r0, c0 int }
	var items []item
	for r0 := 0; r0 < g.j16; r0 += gramRows {
		for c0 := r0 &^ (blockCols - 1); c0 < g.j16; c0 += blockCols {
			items = append(items, item{r0, c0})
		}
	}
	parallel.For(len(items), workers, func(it int) {
		r0, c0 := items[it].r0, items[it].c0
		g.item(tk, r0, min(r0+gramRows, g.j16), c0, min(c0+blockCols, g.j16))
	})
}

// item runs rows [r0, r1) × columns [c0, c1) of the pass (whole tiles; tk tokens): every 8×16 tile
// with a value on or above the diagonal, those the diagonal crosses on a copy. Each tile's kernel
// starts from C's values, which come from memory (a 17408-wide triangle is 1.2 GB) in rows 139 KB
// apart that no hardware prefetcher follows: before each tile, the next tile's C is prefetched, so
// that it arrives while this one runs (the update of a 17408-wide triangle by 512 tokens on two
// cores: 146.7 -> 164.0 GFLOP/s, ten alternating rounds; docs/performance-log.md, "Session 43").
func (g *gram) item(tk, r0, r1, c0, c1 int) {
	p := g.p
	var tmp [8 * 16]float64
	for i := r0; i < r1; i += 8 {
		a := g.pa[i*tk:]
		zeros := g.zeros[i/8]
		for j := max(c0, i&^15); j < c1; j += 16 {
			if ni, nj := nextTile(i, j, r1, c0, c1); ni < r1 {
				prefetch8x16(&p.c[ni*p.ldc+nj], p.ldc)
			}
			b := g.pa[j*tk:]
			ct := p.c[i*p.ldc+j:]
			if j > i { // every value right of the diagonal
				tile(a, b, 8, 8*tk, tk, ct, p.ldc, 1, zeros)
				continue
			}
			for r := range 8 {
				lo := max(0, i+r-j) // the row's first column on or above the diagonal
				clear(tmp[r*16 : r*16+lo])
				copy(tmp[r*16+lo:r*16+16], ct[r*p.ldc+lo:r*p.ldc+16])
			}
			tile(a, b, 8, 8*tk, tk, tmp[:], 16, 1, zeros)
			for r := range 8 {
				lo := max(0, i+r-j)
				copy(ct[r*p.ldc+lo:r*p.ldc+16], tmp[r*16+lo:r*16+16])
			}
		}
	}
}

// tile adds to the 8×16 values at c (rows ldc apart) the products of t packed tokens: a the rows'
// 8-column tile (token after token), b token l's first 8 columns at b[l·ldb] and the other 8 at
// b[l·ldb+bhi]; tile8x16 on AVX-512, four tile4x8 calls (4×8 values each) on AVX2 — the same sums
// for every value.
func tile(a, b []float64, ldb, bhi, t int, c []float64, ldc int, alpha float64, zeros bool) {
	if has8x16 {
		tile8x16(&a[0], 1, 8, &b[0], ldb, bhi, t, &c[0], ldc, alpha, zeros)
		return
	}
	// The kernels read 8·t values of a, token t-1's last columns of b and C's 8 rows of 16.
	_, _, _ = a[8*t-1], b[(t-1)*ldb+bhi+7], c[7*ldc+15]
	tile4x8(&a[0], 1, 8, &b[0], ldb, t, &c[0], ldc, alpha, zeros)
	tile4x8(&a[4], 1, 8, &b[0], ldb, t, &c[4*ldc], ldc, alpha, zeros)
	tile4x8(&a[0], 1, 8, &b[bhi], ldb, t, &c[8], ldc, alpha, zeros)
	tile4x8(&a[4], 1, 8, &b[bhi], ldb, t, &c[4*ldc+8], ldc, alpha, zeros)
}

// nextTile returns the tile item runs after tile (i, j) of rows [.., r1) × columns [c0, c1): the
// next 16 columns of its rows, else the next rows' first tile on or above the diagonal; ni = r1 when
// there is none (rows whose first such tile is past c1 have none, nor have the rows below them).
func nextTile(i, j, r1, c0, c1 int) (ni, nj int) {
	if j+16 < c1 {
		return i, j + 16
	}
	if ni, nj = i+8, max(c0, (i+8)&^15); ni < r1 && nj < c1 {
		return ni, nj
	}
	return r1, 0
}

// gramStripes is GramUpper without the AVX-512 kernel: stripes of gramRows rows, Dsyrk on the
// diagonal block (its upper triangle) and Dgemm on the columns right of it.
func gramStripes(n, t int, x []float64, ldx int, c []float64, ldc int) {
	impl := Implementation{}
	for r0 := 0; r0 < n; r0 += gramRows {
		r1 := min(r0+gramRows, n)
		impl.Dsyrk(blas.Upper, blas.Trans, r1-r0, t, 1, x[r0:], ldx, 1, c[r0*ldc+r0:], ldc)
		if r1 < n {
			impl.Dgemm(blas.Trans, blas.NoTrans, r1-r0, n-r1, t, 1, x[r0:], ldx, x[r1:], ldx, 1, c[r0*ldc+r1:], ldc)
		}
	}
}
