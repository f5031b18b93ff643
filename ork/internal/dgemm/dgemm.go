// Package dgemm is gonum's BLAS with faster forms of the products the pure-Go build's float64 work
// runs, each giving exactly gonum's bits: Dgemm's C = alpha·A·B + beta·C and C = alpha·Aᵀ·B + beta·C
// (GPTQ's block updates, the Cholesky factorization's panel updates, the last update of a Hessian
// encoded block by block), Dtrmm's B = A·B for an upper triangular A (the triangular inverse's
// blocks, trmm.go), Dsyrk's upper C = alpha·Aᵀ·A + beta·C (the Cholesky's diagonal blocks, syrk.go),
// and GramUpper, the upper triangle of C += XᵀX with Dsyrk's and Dgemm's sums (calibration's Hessian
// updates, gram.go).
//
// # The order of the sums
//
// gonum's Dgemm (blas/gonum dgemm.go) scales C by beta first (zeros for beta 0), then, for these two
// forms, adds to every value c[i][j], for l = 0..k-1 in order, tmp·b[l][j] where tmp = alpha·a(i, l)
// — skipping the addition when tmp is zero — through f64.AxpyUnitary, which rounds the product
// b[l][j]·tmp and then adds it to c[i][j]: no fused multiply-add. Its parallel path cuts K into blocks
// of 64 and runs each block of C's values over them in order, so every value is the same sum as on
// its serial path. [Implementation.Dgemm] keeps that order for every value and only computes many
// values at once: 8×16 values in AVX-512 registers (tile8x16; the skip is a mask per row and token,
// or, for alpha ±1, none at all where nonzero8 finds no zero among a tile's 8 rows of A over a block)
// or 4×8 in AVX2 registers (tile4x8; a branch, or for alpha ±1 none where nonzero4 finds no zero
// among a tile's 4 rows of A over a block), the values beyond whole tiles in Go, C cut into
// blocks of columns (and of rows) for GOMAXPROCS goroutines, K into blocks of tokens in order. For
// products of 8 rows and 16 columns or more the kernels read copies of A and B laid out for them
// (pack.go), 512 tokens a pass — on AVX2 four 4×8 tiles an 8×16 one —, else the matrices in place,
// 128 tokens a pass. The other forms (B transposed), every product off amd64
// or without AVX2, and arguments gonum rejects go to gonum itself.
//
// For alpha −1 (the Cholesky factorization's and GPTQ's updates) the kernels subtract b·a from c
// instead of adding b·tmp: the same value, since b·(−a) is −(b·a) and c − p is c + (−p) in IEEE
// arithmetic, signed zeros included. One difference remains: when c and the product are both NaN,
// c's NaN survives where gonum keeps the product's. Arithmetic makes only the one default NaN, so the
// bits differ only for NaN inputs with other payloads; GPTQ's and calibration's inputs are checked
// finite.
package dgemm

import (
	"runtime"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"orkpipe/ork/internal/parallel"
)

// Implementation is gonum's BLAS (blas.Float64) with its Dgemm, Dtrmm and Dsyrk replaced as the
// package doc says.
// Installed with blas64.Use, every blas64 product of the pure-Go build keeps its bits and runs on
// the kernels.
type Implementation struct{ gonum.Implementation }

// Blocks: tokens (K) per pass over a block of C, and C's columns and rows per work item: a block of
// B (128 × 128 values, 128 KiB) stays in a core's L2 cache while the item's rows pass.
const (
	blockK    = 128
	blockCols = 128
	minRows   = 64
)

// Dgemm computes C = alpha·op(A)·op(B) + beta·C with gonum's Dgemm semantics and gonum's bits; see
// the package doc for the forms that run on the kernels.
func (impl Implementation) Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	aTrans := tA == blas.Trans || tA == blas.ConjTrans
	if !has4x8 || tB != blas.NoTrans || !(aTrans || tA == blas.NoTrans) || !valid(aTrans, m, n, k, a, lda, b, ldb, c, ldc) {
		impl.Implementation.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if (alpha == 0 || k == 0) && beta == 1 {
		return
	}
	if beta != 1 {
		for i := range m {
			ci := c[i*ldc : i*ldc+n]
			if beta == 0 {
				clear(ci)
				continue
			}
			for j := range ci {
				ci[j] *= beta
			}
		}
	}
	p := product{m: m, n: n, k: k, alpha: alpha, a: a, ai: lda, al: 1, b: b, ldb: ldb, c: c, ldc: ldc}
	if aTrans {
		p.ai, p.al = 1, lda
	}
	p.run()
}

// valid reports whether gonum's Dgemm would take these arguments (for B not transposed) and has
// work to do: otherwise gonum itself is called, to panic with its message or to return.
func valid(aTrans bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) bool {
	if m <= 0 || n <= 0 || k < 0 || ldb < max(1, n) || ldc < max(1, n) {
		return false
	}
	if aTrans {
		if lda < max(1, m) || len(a) < (k-1)*lda+m {
			return false
		}
	} else if lda < max(1, k) || len(a) < (m-1)*lda+k {
		return false
	}
	return len(b) >= (k-1)*ldb+n && len(c) >= (m-1)*ldc+n
}

// product is one Dgemm of the kernels' forms: a(i, l) = a[i·ai + l·al], b(l, j) = b[l·ldb + j].
type product struct {
	m, n, k int
	alpha   float64
	a       []float64
	ai, al  int
	b       []float64
	ldb     int
	c       []float64
	ldc     int
}

// run adds alpha·op(A)·B to C: work items of blockCols columns by rows (all m, or cut so that there
// are a few items per goroutine), each value's tokens in order within its item.
func (p *product) run() {
	cols := (p.n + blockCols - 1) / blockCols
	workers := runtime.GOMAXPROCS(0)
	if p.m*p.n*p.k < 1<<16 {
		workers = 1
	}
	if has4x8 && p.m >= 8 && p.n >= 16 {
		p.runPacked(workers)
		return
	}
	rowStep := p.m
	if workers > 1 && cols < 4*workers {
		chunks := (4*workers + cols - 1) / cols // row chunks a column block, for about 4 items a goroutine
		rowStep = max(minRows, ((p.m+chunks-1)/chunks+7)&^7)
	}
	rows := (p.m + rowStep - 1) / rowStep
	parallel.For(rows*cols, workers, func(it int) { p.item(it, cols, rowStep) })
}

// item computes work item it: rows [r0, r1) × columns [c0, c1), tokens in blocks of blockK in order.
func (p *product) item(it, cols, rowStep int) {
	r0, c0 := it/cols*rowStep, it%cols*blockCols
	r1, c1 := min(r0+rowStep, p.m), min(c0+blockCols, p.n)
	for l0 := 0; l0 < p.k; l0 += blockK {
		p.block(l0, min(l0+blockK, p.k), r0, r1, c0, c1)
	}
}

// block adds tokens [l0, l1) to rows [r0, r1) × columns [c0, c1): whole 8×16 tiles on AVX-512, what
// is left in 4×8 tiles on AVX2, what is left of that in Go.
func (p *product) block(l0, l1, r0, r1, c0, c1 int) {
	if has8x16 {
		i8, j16 := r0+(r1-r0)&^7, c0+(c1-c0)&^15
		for i := r0; i < i8; i += 8 {
			a := &p.a[i*p.ai+l0*p.al]
			zeros := true
			if j16 > c0 && (p.alpha == 1 || p.alpha == -1) && (p.ai == 1 || p.al == 1) {
				zeros = !nonzero8(a, p.ai, p.al, l1-l0)
			}
			for j := c0; j < j16; j += 16 {
				tile8x16(a, p.ai, p.al, &p.b[l0*p.ldb+j], p.ldb, 8, l1-l0, &p.c[i*p.ldc+j], p.ldc, p.alpha, zeros)
			}
		}
		p.block4(l0, l1, r0, i8, j16, c1)
		p.block4(l0, l1, i8, r1, c0, c1)
		return
	}
	p.block4(l0, l1, r0, r1, c0, c1)
}

// block4 is block in 4×8 tiles and Go.
func (p *product) block4(l0, l1, r0, r1, c0, c1 int) {
	if r0 >= r1 || c0 >= c1 {
		return
	}
	i4, j8 := r0+(r1-r0)&^3, c0+(c1-c0)&^7
	for i := r0; i < i4; i += 4 {
		a := &p.a[i*p.ai+l0*p.al]
		zeros := true
		if j8 > c0+8 && (p.alpha == 1 || p.alpha == -1) && (p.ai == 1 || p.al == 1) {
			zeros = !nonzero4(a, p.ai, p.al, l1-l0)
		}
		for j := c0; j < j8; j += 8 {
			tile4x8(a, p.ai, p.al, &p.b[l0*p.ldb+j], p.ldb, l1-l0, &p.c[i*p.ldc+j], p.ldc, p.alpha, zeros)
		}
	}
	p.sums(l0, l1, r0, i4, j8, c1)
	p.sums(l0, l1, i4, r1, c0, c1)
}

// sums is block's sums in Go for rows [r0, r1) × columns [c0, c1): AxpyUnitary's operations.
func (p *product) sums(l0, l1, r0, r1, c0, c1 int) {
	if c0 >= c1 {
		return
	}
	for i := r0; i < r1; i++ {
		ci := p.c[i*p.ldc+c0 : i*p.ldc+c1]
		for l := l0; l < l1; l++ {
			tmp := p.alpha * p.a[i*p.ai+l*p.al]
			if tmp == 0 {
				continue
			}
			bl := p.b[l*p.ldb+c0 : l*p.ldb+c1]
			for j := range ci {
				ci[j] = float64(bl[j]*tmp) + ci[j]
			}
		}
	}
}
