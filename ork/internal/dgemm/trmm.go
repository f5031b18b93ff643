package dgemm

import (
	"runtime"

	"gonum.org/v1/gonum/blas"

	"orkpipe/ork/internal/parallel"
)

// Dtrmm computes B = alpha·op(A)·B or alpha·B·op(A) (A triangular) with gonum's Dtrmm semantics and
// bits. The form the triangular inverse's blocks call (lapack's Dtrtri: A upper, not unit, on the left,
// alpha 1) runs on the kernels; every other form, and arguments gonum rejects, go to gonum itself.
//
// gonum computes that form row by row from the top, in place: b_i = b_i·a_ii, then for k = i+1..m-1 in
// order, where a_ik is not zero, b_i[j] = b_k[j]·a_ik + b_i[j] (AxpyUnitary) — each row reading only the
// rows below it, not yet changed. Here every row reads those rows from a copy of B made first, so the
// rows are independent: goroutines take groups of trmmGroup rows, top first, and each group reads its
// rows of A once for all of B's columns. (Dtrtri's B is 64 columns wide and A up to the whole factor:
// A's triangle is the product's traffic, and with the columns shared out instead, each goroutine read
// all of it.) Within a group, a tile of rows takes the products of its own rows (the triangle) in Go,
// then kernel calls add those of the rows below the tile, blockK rows of the copy at a time, each
// value's products still in order k. Rows beyond whole tiles and columns beyond whole tiles are done
// in Go.
func (impl Implementation) Dtrmm(s blas.Side, ul blas.Uplo, tA blas.Transpose, d blas.Diag, m, n int, alpha float64, a []float64, lda int, b []float64, ldb int) {
	if !has4x8 || s != blas.Left || ul != blas.Upper || tA != blas.NoTrans || d != blas.NonUnit || alpha != 1 ||
		m <= 0 || n <= 0 || lda < max(1, m) || ldb < max(1, n) || len(a) < lda*(m-1)+m || len(b) < ldb*(m-1)+n {
		impl.Implementation.Dtrmm(s, ul, tA, d, m, n, alpha, a, lda, b, ldb)
		return
	}
	old := getBuf(m * n)
	defer putBuf(old)
	for i := range m {
		copy((*old)[i*n:(i+1)*n], b[i*ldb:i*ldb+n])
	}
	t := trmm{m: m, n: n, a: a, lda: lda, b: b, ldb: ldb, old: *old, h: 4, w: 8}
	if has8x16 {
		t.h, t.w = 8, 16
	}
	workers := runtime.GOMAXPROCS(0)
	if m*m*n < 1<<16 {
		workers = 1
	}
	parallel.For((m+trmmGroup-1)/trmmGroup, workers, func(g int) {
		t.group(g*trmmGroup, min((g+1)*trmmGroup, m))
	})
}

// trmm is one Dtrmm of the kernels' form: B (m × n, rows ldb apart) and its values before the
// product in old (rows n apart); h × w is the kernel's tile.
type trmm struct {
	m, n int
	a    []float64
	lda  int
	b    []float64
	ldb  int
	old  []float64
	h, w int
}

// group computes rows [g0, g1) of B: the columns of whole tiles by tiles of h rows (each its triangle in
// Go and the rows below it within the group on the kernel, then the rows below the group, blockK at a
// time, so that every tile of the group reads them from cache), the rest in Go.
func (t *trmm) group(g0, g1 int) {
	nw := t.n - t.n%t.w
	mh := min(g1, t.m-t.m%t.h)
	if nw == 0 {
		mh = g0
	}
	for i := g0; i < mh; i += t.h {
		for r := i; r < i+t.h; r++ {
			t.row(r, i+t.h, 0, nw)
		}
		t.kernel(i, i+t.h, g1, nw)
	}
	for k0 := g1; k0 < t.m; k0 += blockK {
		for i := g0; i < mh; i += t.h {
			t.kernel(i, k0, min(k0+blockK, t.m), nw)
		}
	}
	for r := mh; r < g1; r++ {
		t.row(r, t.m, 0, nw)
	}
	for r := g0; r < g1; r++ {
		t.row(r, t.m, nw, t.n)
	}
}

// trmmGroup is the rows of B a goroutine takes together: a multiple of both kernels' heights.
const trmmGroup = 64

// trmmScanTiles is the fewest 8×16 tiles a kernel call must span for it to scan its 8 rows of A
// for zeros (nonzero8) and run the tiles without the per-row compare: the scan reads the rows of A
// first, from memory, and pays their misses, which the tiles, with a multiply and an add to overlap
// with every load, hide better. When goroutines shared Dtrtri's 64 columns out, two tiles a call,
// the masked tiles alone took its Dtrmm calls 1.11x faster (the whole inverse of a 17408-wide factor
// 25.7 -> 23.1 s, alternating in one process); with the rows shared out a call spans all four tiles,
// and scanning or not is level (92-110 against 105-110 GFLOP/s at 12288 rows, noise).
const trmmScanTiles = 4

// kernel adds to rows [i, i+h) of B, columns [0, nw) (whole tiles), the products of rows [k0, k1)
// in order.
func (t *trmm) kernel(i, k0, k1, nw int) {
	if k1 <= k0 || nw == 0 {
		return
	}
	zeros := t.h != 8 || nw < trmmScanTiles*t.w || !nonzero8(&t.a[i*t.lda+k0], t.lda, 1, k1-k0)
	for j := 0; j < nw; j += t.w {
		a, b, c := &t.a[i*t.lda+k0], &t.old[k0*t.n+j], &t.b[i*t.ldb+j]
		if t.h == 8 {
			tile8x16(a, t.lda, 1, b, t.n, 8, k1-k0, c, t.ldb, 1, zeros)
		} else {
			tile4x8(a, t.lda, 1, b, t.n, k1-k0, c, t.ldb, 1, true)
		}
	}
}

// row scales row r of B (columns [c0, c1)) by a_rr and adds the products of rows r+1..end-1 in order
// (gonum's ScalUnitary and AxpyUnitary operations).
func (t *trmm) row(r, end, c0, c1 int) {
	if c0 >= c1 {
		return
	}
	br := t.b[r*t.ldb+c0 : r*t.ldb+c1]
	d := t.a[r*t.lda+r]
	for j := range br {
		br[j] = t.old[r*t.n+c0+j] * d
	}
	for k := r + 1; k < end; k++ {
		v := t.a[r*t.lda+k]
		if v == 0 {
			continue
		}
		bk := t.old[k*t.n+c0 : k*t.n+c1]
		for j := range br {
			br[j] = float64(bk[j]*v) + br[j]
		}
	}
}
