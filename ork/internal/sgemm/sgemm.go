// Package sgemm computes the float32 matrix products of the pure-Go build (ork/model's forward
// passes, ork/quant's rotation search), C = A·Bᵀ (+ C) and, for attention's second product, C = A·B,
// with AVX2 and AVX-512 kernels that give exactly the bits gonum's Sgemm(NoTrans, Trans, 1, A, B,
// beta, C) and Sgemm(NoTrans, NoTrans, 1, A, B, 0, C) give on amd64 — the arithmetic the pure-Go
// build's outputs (calibration statistics, hidden states, screen and eval figures, node outputs
// under their keys) have always had — several times faster. [NN]'s order is the plain one (nn.go);
// the rest of this comment is [NT]'s.
//
// # The order of the sums
//
// gonum sums each output as c += DotUnitary(a_i[k0:k1], b_j[k0:k1]) over slices of K in order: the
// whole K in one slice when the product has fewer than 4 tiles of 64×64 outputs, else slices of 64.
// Its amd64 DotUnitary (internal/asm/f32, SSE) first adds the products x·y of the values before b's
// slice reaches a 16-byte boundary into lane 0; then, for each whole 16 values, adds them into two
// four-lane sums (values 0-3 and 8-11 into s, 4-7 and 12-15 into p), which is eight lanes each
// summing every eighth product in order; adds p into s (when a whole 16 was seen); adds the whole
// fours left into s, the last values into lane 0; and returns (s0+s1)+(s2+s3). Every product is
// rounded before it is added (no fused multiply-add). [NT] keeps all of that — the slices, the
// lanes, the alignment of b — and only runs it for 2×4 outputs at a time in AVX2 registers (or, from
// rows of B packed four at a time, 3×4: an output's eight lanes in two registers, four lanes each, two
// outputs a register; 4×4 in AVX-512 ones: two outputs' eight lanes a register, folded by shuffles in
// FOLD4's order; or, from rows of B packed sixteen at a time, 3×16: an output's eight lanes in four
// registers, two lanes each, eight outputs a register, folded mostly lane by lane; a packed product's
// K cut into blocks of whole slices, each slice's sum still added to C in order; [NTRows] decodes
// B's rows as the kernels reach them), so the outputs are the same float32
// values, signed zeros included, on every CPU: the kernels on amd64 with AVX2 (and gonum's
// DotUnitary for the last 1-3 columns); for the shapes they do not take (K not whole sixteens, B off
// a 16-byte boundary), a transposed kernel when B's rows share one alignment (sixteen rows packed
// transposed on AVX-512, eight on AVX2, an output a lane, each lane running DotUnitary's plan for
// that alignment: transposed.go), else gonum's own loops on amd64 (and without AVX2); and [dot] (the
// same sums in Go) on other architectures. On amd64 they keep gonum's operand order too, and with it the
// payload an output keeps where two NaNs meet. ([NN] off amd64 gives gonum's bits there, which are not
// amd64's: nn.go.)
package sgemm

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"

	"orkpipe/ork/internal/parallel"
)

// Slice is the K slice of gonum's parallel Sgemm (blas/gonum blockSize) and tiles its minimum
// (minParBlock): a product of at least tiles slices of Slice×Slice outputs sums over K in slices.
const (
	Slice = 64
	tiles = 4
)

// NT sets C = A·Bᵀ (beta 0) or C += A·Bᵀ (beta 1): C is m×n (row stride ldc), A m×k (lda), B n×k
// (ldb), all row-major. It panics on other betas and on shapes the slices do not hold, as gonum's
// Sgemm does. It runs the rows of B on GOMAXPROCS goroutines when the product is large enough.
func NT(m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	nt(runtime.GOMAXPROCS(0), m, n, k, a, lda, b, ldb, beta, c, ldc)
}

// NTSerial is NT on the caller's goroutine alone (the same values), for callers that run many
// products at once on their own goroutines.
func NTSerial(m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	nt(1, m, n, k, a, lda, b, ldb, beta, c, ldc)
}

// nt is NT on at most workers goroutines.
func nt(workers, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if beta != 0 && beta != 1 {
		panic(fmt.Sprintf("sgemm: beta %v: want 0 or 1", beta))
	}
	if m < 0 || n < 0 || k < 0 || lda < max(1, k) || ldb < max(1, k) || ldc < max(1, n) {
		panic(fmt.Sprintf("sgemm: m %d n %d k %d lda %d ldb %d ldc %d", m, n, k, lda, ldb, ldc))
	}
	if m == 0 || n == 0 {
		return
	}
	if len(a) < (m-1)*lda+k || len(b) < (n-1)*ldb+k || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("sgemm: %d x %d x %d: A has %d values, B %d, C %d", m, n, k, len(a), len(b), len(c)))
	}
	if beta == 0 {
		for i := range m {
			clear(c[i*ldc : i*ldc+n])
		}
	}
	if k == 0 {
		return
	}
	slice := sliceOf(m, n, k)
	p := product{m: m, k: k, a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, slice: slice}
	if !p.kernelShape() && !p.transposedShape() && runtime.GOARCH == "amd64" && workers > 1 {
		// gonum's own SSE loops sum in this order, faster than dot (C is zeroed already: beta 1).
		gonum.Implementation{}.Sgemm(blas.NoTrans, blas.Trans, m, n, k, 1, a, lda, b, ldb, 1, c, ldc)
		return
	}
	p.run(workers, n)
}

// sliceOf is the slice of K NT sums an m×n×k product's outputs over: the whole K, or Slice when the
// product has tiles slices of Slice×Slice outputs or more.
func sliceOf(m, n, k int) int {
	if ceilDiv(m, Slice)*ceilDiv(n, Slice) >= tiles {
		return Slice
	}
	return k
}

// run computes the product's n columns on at most workers goroutines.
func (p *product) run(workers, n int) {
	if p.m*n*p.k < 1<<18 || workers == 1 || n < 8 {
		p.cols(0, n)
		return
	}
	// Column ranges of whole fours (sixteens where packed runs), one a worker: every output is summed
	// the same way whoever sums it.
	whole := 4
	if g := p.groups(); g != nil {
		whole = g.rows
	}
	parallel.Split(n, (ceilDiv(n, workers)+whole-1)&^(whole-1), p.cols)
}

// GonumRegistered reports whether blas32 runs gonum's own kernels (the pure-Go build), whose bits NT
// and NN give; under -tags blas it is OpenBLAS (ork/quant registers it), whose sums are its own.
func GonumRegistered() bool {
	_, ok := blas32.Implementation().(gonum.Implementation)
	return ok
}

// Sliced reports whether NT sums a product with n columns (rows of B) over slices of K whatever its
// number of rows m: then each row of C is the same float32 values however many rows a call has, and
// rows of several products can be multiplied in one call.
func Sliced(n int) bool { return ceilDiv(n, Slice) >= tiles }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// product is one NT call's operands.
type product struct {
	m, k       int
	a, b, c    []float32
	lda, ldb   int
	ldc, slice int
	rows       Rows     // NTRows: B's rows decoded on demand (b is nil, ldb k)
	failed     *failure // NTRows: the first error of rows.Decode
}

// panelBytes bounds the rows of B one pass over A's rows reuses (about half of a core's L2 cache;
// packed, a block of blockK values of each).
const panelBytes = 256 << 10

// Packing: a product of at least packRows rows of A packs the rows of B sixteen at a time (pack16)
// and runs kernel3x16 over them on AVX-512, four at a time (pack4) and kernel3x4p on AVX2, blockK
// values of K at a time when it sums in slices (a multiple of Slice, so that no slice straddles two
// blocks; a group of sixteen packed rows of B takes 32 KiB of L1, of four 8 KiB, three rows of A 6
// KiB), the rows of A in blocks of rowBlockBytes (96 rows at blockK: 1.15x the rate of passing every
// group over three rows at a time for 512 tokens through a 5120 x 17408 Q8_0 weight, 1.07x for 17408
// x 5120; docs/performance-log.md, "Session 43").
const (
	packRows      = 16
	blockK        = 512
	rowBlockBytes = 192 << 10
)

// cols computes the outputs of columns [j0, j1) (rows j0..j1-1 of B): with the kernels, panels of
// B's rows that stay in cache while A's rows pass — when A has packRows rows or more, from packed
// groups of B's rows, 3×16 outputs at a time on AVX-512 and 3×4 on AVX2 (the columns past the last
// whole group as if A had fewer rows); else from B's rows as they are, 4×4 outputs on AVX-512, 2×4 on
// AVX2, 1×4 for a last row of A — the last 1-3 columns with dots; every output with dots where the
// kernels do not take the product (no AVX2 or not amd64, or B not aligned the kernels' way and not on
// amd64, where gonum takes it).
func (p *product) cols(j0, j1 int) {
	if !p.kernelShape() {
		jt := j0
		if p.transposedShape() {
			jt = j0 + (j1-j0)&^(transposedGroup()-1)
			p.transposed(j0, jt)
		}
		if jt < j1 {
			p.dots(0, p.m, jt, j1, p.b[jt*p.ldb:], p.ldb)
		}
		return
	}
	j4 := j0 + (j1-j0)&^3
	j := j0
	if g := p.groups(); g != nil {
		j = j0 + (j1-j0)&^(g.rows-1)
		if !p.packed(j0, j, g) {
			return
		}
	}
	if !p.panels(j, j4) || j4 == j1 {
		return
	}
	raw := p.decodeBuf()
	defer p.putDecodeBuf(raw)
	if b, ldb, ok := p.panelOf(raw, j4, j1, 0, p.k); ok {
		p.dots(0, p.m, j4, j1, b, ldb)
	}
}

// panels computes the outputs of columns [j0, j1), a multiple of four, from B's rows as they are (or,
// NTRows, decoded a panel at a time); false when a decode failed.
func (p *product) panels(j0, j1 int) bool {
	if j0 == j1 {
		return true
	}
	raw := p.decodeBuf()
	defer p.putDecodeBuf(raw)
	panel := max(4, panelBytes/(4*p.k)&^3)
	for q0 := j0; q0 < j1; q0 += panel {
		q1 := min(q0+panel, j1)
		b, ldb, ok := p.panelOf(raw, q0, q1, 0, p.k)
		if !ok {
			return false
		}
		i := 0
		if available512 {
			for ; i+4 <= p.m; i += 4 {
				for j := q0; j < q1; j += 4 {
					kernel4x4z(&p.a[i*p.lda], p.lda, &b[(j-q0)*ldb], ldb, &p.c[i*p.ldc+j], p.ldc, p.k, p.slice)
				}
			}
		}
		p.lastRows(i, q0, q1, b, ldb)
	}
	return true
}

// lastRows computes the outputs of rows [i, m) of A (the rows the four-row kernels leave) in
// columns [j0, j1), a multiple of four, from the rows of B at b (row j0 first, ldb apart): two rows
// at a time, then one.
func (p *product) lastRows(i, j0, j1 int, b []float32, ldb int) {
	for ; i+2 <= p.m; i += 2 {
		for j := j0; j < j1; j += 4 {
			kernel2x4(&p.a[i*p.lda], p.lda, &b[(j-j0)*ldb], ldb, &p.c[i*p.ldc+j], p.ldc, p.k, p.slice)
		}
	}
	if i < p.m {
		for j := j0; j < j1; j += 4 {
			kernel1x4(&p.a[i*p.lda], &b[(j-j0)*ldb], ldb, &p.c[i*p.ldc+j], p.k, p.slice)
		}
	}
}

// packBufs holds the packed panels' buffers between calls, one a goroutine while it packs.
var packBufs sync.Pool

// groupKernels are the kernels of one packed layout: pack writes rows of B as the kernels read them.
type groupKernels struct {
	rows int // rows of B a group holds: the outputs a kernel call computes in each row of A
	pack func(dst *float32, b *float32, ldb int, k int)
	k3   func(a *float32, lda int, pb *float32, c *float32, ldc int, k, slice int, next *float32)
	k1   func(a *float32, pb *float32, c *float32, k, slice int)
}

var (
	groups16 = groupKernels{16, pack16, kernel3x16, kernel1x16}
	groups4  = groupKernels{4, pack4, kernel3x4p, kernel1x4p}
)

// groups returns the packed layout of this product's kernels when A has packRows rows or more, else
// nil (cols packs only where the kernels take the product: kernelShape).
func (p *product) groups() *groupKernels {
	switch {
	case p.m < packRows:
		return nil
	case available512:
		return &groups16
	case available:
		return &groups4
	}
	return nil
}

// packed computes the outputs of columns [j0, j1), a multiple of g.rows, with g's kernels: for each
// panel of B's rows and each block of K, the panel's rows packed once (NTRows: decoded, then packed),
// then for each block of A's rows (rowBlockBytes of the block of K), each group of packed rows over the
// block's rows three at a time (each output's slices still added to C in order, block after block);
// the last one or two rows with g.k1; false when a decode failed. A group (32 KiB at blockK for sixteen rows, 8 KiB for four) stays in L1 while the rows pass,
// the rows' block in L2 while the groups pass; the first group's calls bring the rows from memory
// (calibration's 512 rows of a 17408-wide input are 35 MB), each prefetching the next three rows.
func (p *product) packed(j0, j1 int, g *groupKernels) bool {
	if j0 == j1 {
		return true
	}
	kb := p.k
	if p.slice < p.k {
		kb = min(p.k, blockK)
	}
	panel := max(g.rows, panelBytes/(4*kb)/g.rows*g.rows)
	size := min(panel, j1-j0) * kb
	buf, _ := packBufs.Get().(*[]float32)
	if buf == nil || cap(*buf) < size {
		b := make([]float32, size)
		buf = &b
	}
	defer packBufs.Put(buf)
	pb := (*buf)[:size]
	raw := p.decodeBuf()
	defer p.putDecodeBuf(raw)
	m3 := p.m - p.m%3
	rows := max(3, rowBlockBytes/(4*kb)/3*3)
	for q0 := j0; q0 < j1; q0 += panel {
		q1 := min(q0+panel, j1)
		for k0 := 0; k0 < p.k; k0 += kb {
			kn := min(kb, p.k-k0)
			b, ldb, ok := p.panelOf(raw, q0, q1, k0, k0+kn)
			if !ok {
				return false
			}
			for j := q0; j < q1; j += g.rows {
				g.pack(&pb[(j-q0)*kn], &b[(j-q0)*ldb], ldb, kn)
			}
			for i0 := 0; i0 < m3; i0 += rows {
				i1 := min(i0+rows, m3)
				for j := q0; j < q1; j += g.rows {
					for i := i0; i < i1; i += 3 {
						var next *float32
						if j == q0 && i+3 < p.m {
							next = &p.a[(i+3)*p.lda+k0]
						}
						g.k3(&p.a[i*p.lda+k0], p.lda, &pb[(j-q0)*kn], &p.c[i*p.ldc+j], p.ldc, kn, p.slice, next)
					}
				}
			}
			for i := m3; i < p.m; i++ {
				for j := q0; j < q1; j += g.rows {
					g.k1(&p.a[i*p.lda+k0], &pb[(j-q0)*kn], &p.c[i*p.ldc+j], kn, p.slice)
				}
			}
		}
	}
	return true
}

// kernelShape reports whether the kernels compute this product: AVX2, every slice whole sixteens
// (k a multiple of 16) and every row of B starting on a 16-byte boundary (so no value of a slice is
// summed before its sixteens; NTRows decodes them so).
func (p *product) kernelShape() bool {
	if !available || p.k%16 != 0 {
		return false
	}
	return p.rows != nil || p.ldb%4 == 0 && uintptr(unsafe.Pointer(&p.b[0]))%16 == 0
}

// dots computes outputs [i0, i1) × [j0, j1) one at a time, from the rows of B at b (row j0 first, ldb
// apart): on amd64 with gonum's own DotUnitary
// (through Sdot), whose operand order also decides which of two NaNs' payloads a sum keeps (dot,
// compiled Go, gives the same values and not always the same NaN: TestNaNPayloads); elsewhere with
// dot.
func (p *product) dots(i0, i1, j0, j1 int, b []float32, ldb int) {
	for i := i0; i < i1; i++ {
		ai := p.a[i*p.lda : i*p.lda+p.k]
		ci := p.c[i*p.ldc:]
		for j := j0; j < j1; j++ {
			bj := b[(j-j0)*ldb : (j-j0)*ldb+p.k]
			for k0 := 0; k0 < p.k; k0 += p.slice {
				k1 := min(k0+p.slice, p.k)
				if runtime.GOARCH == "amd64" {
					ci[j] += gonum.Implementation{}.Sdot(k1-k0, ai[k0:k1], 1, bj[k0:k1], 1)
				} else {
					ci[j] += dot(ai[k0:k1], bj[k0:k1])
				}
			}
		}
	}
}

// dot is gonum's amd64 DotUnitary(x, y) in Go, bit for bit: the products before y reaches a 16-byte
// boundary into lane 0, whole sixteens into eight lanes (lane l: every product at l mod 8), the
// lanes folded to four (when a sixteen was seen), whole fours into the four, the rest into lane 0,
// and (s0+s1)+(s2+s3). Every product is rounded to float32 before it is added.
func dot(x, y []float32) float32 {
	n := min(len(x), len(y))
	var s [8]float32
	i := 0
	if off := uintptr(unsafe.Pointer(unsafe.SliceData(y))) % 16; off != 0 && n > 0 {
		for t := (16 - off) / 4; t > 0 && n > 0; t-- {
			s[0] += float32(x[i] * y[i])
			i++
			n--
		}
	}
	if n >= 16 {
		for ; n >= 16; n -= 16 {
			for l := range 16 {
				s[l%8] += float32(x[i+l] * y[i+l])
			}
			i += 16
		}
		for l := range 4 {
			s[l] += s[l+4]
		}
	}
	for ; n >= 4; n -= 4 {
		for l := range 4 {
			s[l] += float32(x[i+l] * y[i+l])
		}
		i += 4
	}
	for ; n > 0; n-- {
		s[0] += float32(x[i] * y[i])
		i++
	}
	return (s[0] + s[1]) + (s[2] + s[3])
}
