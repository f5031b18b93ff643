package sgemm

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Rows is a matrix B whose rows are decoded on demand (a weight kept in its file's encoding): Decode
// writes values [k0, k1) of rows [j0, j1) to dst, k1-k0 values a row, row after row. NTRows calls it
// from several goroutines at once, for disjoint rows, with k0 = 0 or a multiple of BlockK and k1 =
// min(k0+BlockK, k) or k.
type Rows interface {
	Decode(dst []float32, j0, j1, k0, k1 int) error
}

// BlockK is the granularity of the values of a row NTRows asks Rows.Decode for (a multiple of every
// GGUF block size).
const BlockK = blockK

// DecodesRows reports whether NTRows takes products of rows of k values on this CPU: the kernels'
// shape (AVX2, k a positive multiple of 16).
func DecodesRows(k int) bool { return available && k > 0 && k%16 == 0 }

// NTRows is NT with B (n rows of k values) given by b: the same outputs, bit for bit, from panels of
// B's rows decoded as the kernels reach them (about 256 KiB of values at a time a goroutine, into
// scratch aligned as the kernels want rows), so that B is never whole in memory as float32. It panics
// where !DecodesRows(k) and on the shapes NT panics on; it returns the first error of b.Decode, and then
// C's values are unspecified.
func NTRows(m, n, k int, a []float32, lda int, b Rows, beta float32, c []float32, ldc int) error {
	if !DecodesRows(k) {
		panic(fmt.Sprintf("sgemm: NTRows with k %d: want DecodesRows (AVX2, k a positive multiple of 16)", k))
	}
	if beta != 0 && beta != 1 {
		panic(fmt.Sprintf("sgemm: beta %v: want 0 or 1", beta))
	}
	if m < 0 || n < 0 || lda < k || ldc < max(1, n) {
		panic(fmt.Sprintf("sgemm: m %d n %d k %d lda %d ldc %d", m, n, k, lda, ldc))
	}
	if m == 0 || n == 0 {
		return nil
	}
	if len(a) < (m-1)*lda+k || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("sgemm: %d x %d x %d: A has %d values, C %d", m, n, k, len(a), len(c)))
	}
	if beta == 0 {
		for i := range m {
			clear(c[i*ldc : i*ldc+n])
		}
	}
	p := product{m: m, k: k, a: a, lda: lda, ldb: k, c: c, ldc: ldc, slice: sliceOf(m, n, k),
		rows: b, failed: new(failure)}
	p.run(runtime.GOMAXPROCS(0), n)
	return p.failed.err
}

// RowsScratchBytes is the most scratch NTRows holds for decoded rows of a B of n rows of k values: one
// buffer a goroutine (GOMAXPROCS of them), each at most max(panelBytes, 16 rows of k) of float32 values
// (a packed group's rows of a whole K) and the alignment, and the goroutines' rows disjoint, so never
// more than B's n·k values in all.
func RowsScratchBytes(n, k int) int64 {
	w := int64(runtime.GOMAXPROCS(0))
	return min(w*max(panelBytes, 16*4*int64(k)), 4*int64(n)*int64(k)) + 12*w
}

// failure holds the first error of an NTRows' decodes, from any of its goroutines.
type failure struct {
	mu  sync.Mutex
	err error
}

func (f *failure) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// decodeBufs holds NTRows' decoded panels between calls, one a goroutine while it decodes.
var decodeBufs sync.Pool

// decodeBuf returns a buffer for panelOf (nil for a product of B in memory).
func (p *product) decodeBuf() *[]float32 {
	if p.rows == nil {
		return nil
	}
	buf, _ := decodeBufs.Get().(*[]float32)
	if buf == nil {
		buf = new([]float32)
	}
	return buf
}

func (p *product) putDecodeBuf(buf *[]float32) {
	if buf != nil {
		decodeBufs.Put(buf)
	}
}

// panelOf returns rows [j0, j1) of B from value k0 on as the kernels read them, row j at b[(j-j0)·ldb]:
// B itself, or (NTRows) values [k0, k1) of the rows decoded into buf, ldb = k1-k0, the first on a 16-byte
// boundary. ok is false when the decode failed (its error is the product's failure).
func (p *product) panelOf(buf *[]float32, j0, j1, k0, k1 int) (b []float32, ldb int, ok bool) {
	if p.rows == nil {
		return p.b[j0*p.ldb+k0:], p.ldb, true
	}
	w := k1 - k0
	n := (j1 - j0) * w
	if cap(*buf) < n+3 {
		*buf = make([]float32, n+3)
	}
	s := (*buf)[:cap(*buf)]
	off := (16 - int(uintptr(unsafe.Pointer(&s[0]))%16)) % 16 / 4
	d := s[off : off+n]
	if err := p.rows.Decode(d, j0, j1, k0, k1); err != nil {
		p.failed.set(fmt.Errorf("sgemm: decoding rows [%d, %d) of B, values [%d, %d): %w", j0, j1, k0, k1, err))
		return nil, 0, false
	}
	return d, w, true
}
