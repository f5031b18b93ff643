package dgemm

import (
	"math/bits"
	"sync"

	"orkpipe/ork/internal/parallel"
)

// The kernel path of Dgemm runs on copies of its operands laid out for the kernels ("packed"): a
// kernel then reads both from consecutive addresses instead of one cache line (A) and two (B) per
// token at the matrices' strides. At the strides these products have (17408 values, a multiple of
// 4 KiB), every token's line falls in the same cache sets, so in place a tile's A values and a
// block's B rows evicted one another; packed, the block of B stays in L2 and a tile's A values in
// L1 for a longer run of tokens (packK instead of blockK), and C's tile is loaded and stored a
// quarter as often. Packing moves values, it computes nothing: every value is the same sum in the
// same order as before.
//
// A is packed whole (in chunks of rows when large) before the work items start: row tiles of 8, a
// tile's values token after token (a(i, l) at tile·8·k + l·8 + i%8). Each work item packs its block
// of B (packK tokens × up to blockCols columns, token after token) once per pass and runs every
// row tile of the item over it.
var (
	// packK is the tokens of a packed pass: C's tile stays in the kernel's registers over packK
	// tokens, and a block of B (packK × blockCols values, 512 KiB) stays in L2.
	packK = 512
	// packAMax bounds the values of one packed chunk of A (16 MiB): a product with more rows runs
	// in chunks of rows, each packed in turn.
	packAMax = 1 << 21
)

// bufs holds buffers between products, one pool per size class: class c holds buffers of exactly
// 1<<c values (getBuf rounds a request up to its class). A's packed chunks (at most packAMax values,
// sizes varying with the product's shape), the work items' blocks of B (packK·blockCols values),
// Dtrmm's copies of B (m × n: Dtrtri's panels grow to 17408 × 64 values) and GramUpper's scratch when
// the caller has none come and go in the same products; one pool for all of them handed a request a
// buffer too small for it, which was dropped and a new one allocated: at K = 17408 a new 16 MiB chunk
// of A per product of the factorisation, hundreds of MiB of garbage per weight that only the
// collector bounded. With a pool per class a buffer is reused by requests of its class, and what the
// pools hold is bounded by the buffers in use at once, each at most twice its request.
var bufs [bits.UintSize]sync.Pool

// bufClass is the size class of n values: the smallest c with n <= 1<<c.
func bufClass(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// getBuf returns a buffer of n values (capacity that of n's class) from bufs, its old values left in
// it, or a new one.
func getBuf(n int) *[]float64 {
	c := bufClass(n)
	if v, ok := bufs[c].Get().(*[]float64); ok {
		*v = (*v)[:n]
		return v
	}
	v := make([]float64, n, 1<<c)
	return &v
}

// putBuf returns a buffer from getBuf to its class's pool.
func putBuf(v *[]float64) { bufs[bufClass(cap(*v))].Put(v) }

// packed is A packed for one product: m8 rows (whole tiles of 8) of k tokens, and per tile and pass
// of packK tokens whether the kernel must test its values for zeros.
type packed struct {
	a     *[]float64
	zeros []bool
	k     int
}

// packA packs rows [0, m8) of p's A (m8 a multiple of 8) on up to workers goroutines.
func (p *product) packA(m8, workers int) packed {
	k := p.k
	passes := (k + packK - 1) / packK
	pk := packed{a: getBuf(m8 * k), zeros: make([]bool, m8/8*passes), k: k}
	pa := *pk.a
	skip := p.alpha == 1 || p.alpha == -1 // the kernel may run without the compare
	parallel.For(m8/8, min(workers, max(1, m8*k>>16)), func(t int) {
		dst := pa[t*8*k : (t+1)*8*k]
		i := t * 8
		if p.ai == 1 { // a token's 8 values are consecutive
			packTokens8(dst, p.a[i:], p.al, k)
		} else { // a row's tokens are consecutive
			for r := range 8 {
				s := p.a[(i+r)*p.ai : (i+r)*p.ai+k]
				for l, v := range s {
					dst[l*8+r] = v
				}
			}
		}
		for q := range passes {
			l0, l1 := q*packK, min((q+1)*packK, k)
			pk.zeros[t*passes+q] = !skip || !nonzero(dst[l0*8:], l1-l0)
		}
	})
	return pk
}

// nonzero reports whether the n packed tokens at a (8 values each) hold no zero: nonzero8 on AVX-512,
// nonzero4 over each half of the tile on AVX2.
func nonzero(a []float64, n int) bool {
	_ = a[8*n-1]
	if has8x16 {
		return nonzero8(&a[0], 1, 8, n)
	}
	return nonzero4(&a[0], 1, 8, n) && nonzero4(&a[4], 1, 8, n)
}

// packTokens8 copies n tokens of 8 consecutive values, a[l·al : l·al+8] for l < n, to dst token after
// token (8·n values): a tile of A in the kernel's layout, from rows whose tokens are al apart.
func packTokens8(dst, a []float64, al, n int) {
	for l := range n {
		s := a[l*al : l*al+8 : l*al+8]
		d := dst[l*8 : l*8+8 : l*8+8]
		d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7] = s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
	}
}

// release returns the packed values to bufs.
func (pk packed) release() { putBuf(pk.a) }

// runPacked is run on the kernels with packed operands (the package doc of pack.go); the caller
// checked has4x8. Rows beyond whole tiles of 8 and columns beyond whole tiles of 16 take
// block4's kernels and Go in place, pass by pass, so that every value still sees its tokens in order.
func (p *product) runPacked(workers int) {
	rows := max(8, (packAMax/max(1, p.k))&^7)
	m8 := p.m &^ 7
	for r0 := 0; r0 < m8; r0 += rows {
		r1 := min(r0+rows, m8)
		sub := *p
		sub.m = r1 - r0
		sub.a = p.a[r0*p.ai:]
		sub.c = p.c[r0*p.ldc:]
		sub.runChunk(workers, sub.packA(sub.m, workers))
	}
	if m8 < p.m { // the last rows, fewer than 8, in place
		sub := *p
		sub.m = p.m - m8
		sub.a = p.a[m8*p.ai:]
		sub.c = p.c[m8*p.ldc:]
		cols := (p.n + blockCols - 1) / blockCols
		parallel.For(cols, workers, func(it int) {
			c0, c1 := it*blockCols, min((it+1)*blockCols, p.n)
			for l0 := 0; l0 < p.k; l0 += blockK {
				sub.block4(l0, min(l0+blockK, p.k), 0, sub.m, c0, c1)
			}
		})
	}
}

// runChunk runs a product whose m rows are whole tiles of 8, packed in pk, in work items of blockCols
// columns by rows (cut as run cuts them).
func (p *product) runChunk(workers int, pk packed) {
	defer pk.release()
	cols := (p.n + blockCols - 1) / blockCols
	rowStep := p.m
	if workers > 1 && cols < 4*workers {
		chunks := (4*workers + cols - 1) / cols
		rowStep = max(minRows, ((p.m+chunks-1)/chunks+7)&^7)
	}
	rows := (p.m + rowStep - 1) / rowStep
	parallel.For(rows*cols, workers, func(it int) {
		r0, c0 := it/cols*rowStep, it%cols*blockCols
		p.itemPacked(pk, r0, min(r0+rowStep, p.m), c0, min(c0+blockCols, p.n))
	})
}

// itemPacked computes rows [r0, r1) (whole tiles) × columns [c0, c1) in passes of packK tokens: the
// pass's block of B packed, then every row tile over it; the columns beyond whole tiles of 16 in place.
func (p *product) itemPacked(pk packed, r0, r1, c0, c1 int) {
	k, passes := p.k, (p.k+packK-1)/packK
	j16 := c0 + (c1-c0)&^15
	w := j16 - c0
	var bp []float64
	if w > 0 {
		buf := getBuf(min(k, packK) * w)
		defer putBuf(buf)
		bp = *buf
	}
	pa := *pk.a
	for q := range passes {
		l0, l1 := q*packK, min((q+1)*packK, k)
		if w > 0 {
			for l := l0; l < l1; l++ {
				copy(bp[(l-l0)*w:(l-l0+1)*w], p.b[l*p.ldb+c0:l*p.ldb+j16])
			}
			for i := r0; i < r1; i += 8 {
				a := pa[i*k+l0*8:]
				zeros := pk.zeros[i/8*passes+q]
				for j := 0; j < w; j += 16 {
					// The next tile's C, as GramUpper's items prefetch it (gram.item).
					switch {
					case j+16 < w:
						prefetch8x16(&p.c[i*p.ldc+c0+j+16], p.ldc)
					case i+8 < r1:
						prefetch8x16(&p.c[(i+8)*p.ldc+c0], p.ldc)
					case q+1 < passes:
						prefetch8x16(&p.c[r0*p.ldc+c0], p.ldc)
					}
					tile(a, bp[j:], w, 8, l1-l0, p.c[i*p.ldc+c0+j:], p.ldc, p.alpha, zeros)
				}
			}
		}
		p.block4(l0, l1, r0, r1, j16, c1)
	}
}
