package dgemm

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
)

// Dtrmm computes B = alpha·op(A)·B or alpha·B·op(A) (A triangular) with gonum's Dtrmm semantics and
// bits. The form the triangular inverse's blocks call (lapack's Dtrtri: A upper, not unit, on the left,
// alpha 1) runs on the kernels; every other form, and arguments gonum rejects, go to gonum itself.
//
// gonum computes that form row by row from the top, in place: b_i = b_i·a_ii, then for k = i+1..m-1 in
// order, where a_ik is not zero, b_i[j] = b_k[j]·a_ik + b_i[j] (AxpyUnitary) — each row reading only the
// rows below it, not yet changed. Here a tile of rows takes the products of its own rows (the triangle)
// in Go, then kernel calls add those of the rows below the tile (cols says in which order), each
// value's products still in order k; goroutines take ranges of columns, each running its rows from
// the top.
func (impl Implementation) Dtrmm(s blas.Side, ul blas.Uplo, tA blas.Transpose, d blas.Diag, m, n int, alpha float64, a []float64, lda int, b []float64, ldb int) {
	if !has4x8 || s != blas.Left || ul != blas.Upper || tA != blas.NoTrans || d != blas.NonUnit || alpha != 1 ||
		m <= 0 || n <= 0 || lda < max(1, m) || ldb < max(1, n) || len(a) < lda*(m-1)+m || len(b) < ldb*(m-1)+n {
		impl.Implementation.Dtrmm(s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
		return
	}
	t := trmm{m: m, a: a, lda: lda, b: b, ldb: ldb, h: 4, w: 8}
	if has8x16 {
		t.h, t.w = 8, 16
	}
	tiles := n / t.w
	t.cols(tiles*t.w, n) // the columns beyond whole tiles, in Go
	workers := min(tiles, runtime.GOMAXPROCS(0))
	if m*m*n < 1<<16 {
		workers = min(workers, 1)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.cols(tiles*w/workers*t.w, tiles*(w+1)/workers*t.w)
		}()
	}
	wg.Wait()
}

// trmm is one Dtrmm of the kernels' form; h × w is the kernel's tile.
type trmm struct {
	m    int
	a    []float64
	lda  int
	b    []float64
	ldb  int
	h, w int
}

// cols computes columns [c0, c1) of B, rows from the top, in groups of trmmGroup rows: each tile of
// h rows of a group takes its triangle in Go and the rows below it within the group on the kernel
// (w columns at a time — c1-c0 whole w's, or Go when it is not); then the group's tiles take the
// rows below the group, blockK rows of B at a time, so that every tile of the group reads them from
// cache (a pass over all of them per tile read B's lower rows from memory for every h rows of output:
// half the kernel's rate on the triangular inverse's panels, whose rows are a whole factor's row
// apart). Every value still takes its products in order k, and every row read is one not yet
// changed: the rows below a tile are rewritten only when their own tile's turn comes. The last rows
// are done in Go.
func (t *trmm) cols(c0, c1 int) {
	if c0 >= c1 {
		return
	}
	mh := 0
	if (c1-c0)%t.w == 0 {
		mh = t.m - t.m%t.h
	}
	for g := 0; g < mh; g += trmmGroup {
		ge := min(g+trmmGroup, mh)
		for i := g; i < ge; i += t.h {
			for r := i; r < i+t.h; r++ {
				t.row(r, i+t.h, c0, c1)
			}
			t.kernel(i, i+t.h, ge, c0, c1)
		}
		for k0 := ge; k0 < t.m; k0 += blockK {
			for i := g; i < ge; i += t.h {
				t.kernel(i, k0, min(k0+blockK, t.m), c0, c1)
			}
		}
	}
	for r := mh; r < t.m; r++ {
		t.row(r, t.m, c0, c1)
	}
}

// trmmGroup is the rows of B a pass of cols takes together: a multiple of both kernels' heights.
const trmmGroup = 64

// trmmScanTiles is the fewest 8×16 tiles a kernel call must span for it to scan its 8 rows of A
// for zeros (nonzero8) and run the tiles without the per-row compare: the scan reads the rows of A
// first, from memory, and pays their misses, which the tiles, with a multiply and an add to overlap
// with every load, hide better. Dtrtri's panels are 64 columns wide, two tiles a goroutine on two
// cores: there the masked tiles alone take its Dtrmm calls 1.11x faster (the whole inverse of a
// 17408-wide factor 25.7 -> 23.1 s, of an 8192-wide one 2.76 -> 2.48 s, alternating in one process).
// (Sharing each group's rows out instead of the columns, so that a goroutine's tiles span all four,
// was slower: 2.56 -> 2.80 s at 8192.)
const trmmScanTiles = 4

// kernel adds to rows [i, i+h) of B, columns [c0, c1) (whole tiles), the products of rows [k0, k1)
// in order.
func (t *trmm) kernel(i, k0, k1, c0, c1 int) {
	if k1 <= k0 || c0 >= c1 {
		return
	}
	zeros := t.h != 8 || c1-c0 < trmmScanTiles*t.w || !nonzero8(&t.a[i*t.lda+k0], t.lda, 1, k1-k0)
	for j := c0; j < c1; j += t.w {
		a, b, c := &t.a[i*t.lda+k0], &t.b[k0*t.ldb+j], &t.b[i*t.ldb+j]
		if t.h == 8 {
			tile8x16(a, t.lda, 1, b, t.ldb, k1-k0, c, t.ldb, 1, zeros)
		} else {
			tile4x8(a, t.lda, 1, b, t.ldb, k1-k0, c, t.ldb, 1)
		}
	}
}

// row scales row r of B (columns [c0, c1)) by a_rr and adds the products of rows r+1..end-1 in order
// (gonum's ScalUnitary and AxpyUnitary operations).
func (t *trmm) row(r, end, c0, c1 int) {
	br := t.b[r*t.ldb+c0 : r*t.ldb+c1]
	d := t.a[r*t.lda+r]
	for j := range br {
		br[j] *= d
	}
	for k := r + 1; k < end; k++ {
		v := t.a[r*t.lda+k]
		if v == 0 {
			continue
		}
		bk := t.b[k*t.ldb+c0 : k*t.ldb+c1]
		for j := range br {
			br[j] = float64(bk[j]*v) + br[j]
		}
	}
}
