package sgemm

import "unsafe"

// transposedShape reports whether the transposed kernel (dotT16) takes the products the others do
// not: on AVX-512, rows of B whose starts share one alignment (ldb a multiple of four values), so
// that every output of a group of sixteen rows follows the same DotUnitary plan, whatever K and
// wherever B starts.
func (p *product) transposedShape() bool { return available512 && p.ldb%4 == 0 }

// transposed computes the outputs of columns [j0, j1), a multiple of sixteen: for each group of
// sixteen rows of B and each slice of K, the group's slice packed transposed (packT16), then every
// row of A against it (dotT16), the slices added to C in order.
func (p *product) transposed(j0, j1 int) {
	if j0 == j1 {
		return
	}
	size := 16 * min(p.slice, p.k)
	buf, _ := packBufs.Get().(*[]float32)
	if buf == nil || cap(*buf) < size {
		b := make([]float32, size)
		buf = &b
	}
	defer packBufs.Put(buf)
	pb := (*buf)[:size]
	for g := j0; g < j1; g += 16 {
		for k0 := 0; k0 < p.k; k0 += p.slice {
			n := min(p.slice, p.k-k0)
			packT16(pb, p.b[g*p.ldb+k0:], p.ldb, n)
			tr, n16, n4, n1 := dotPlan(uintptr(unsafe.Pointer(&p.b[g*p.ldb+k0])), n)
			for i := range p.m {
				dotT16(&p.a[i*p.lda+k0], &pb[0], &p.c[i*p.ldc+g], tr, n16, n4, n1)
			}
		}
	}
}

// packT16 writes the first n values of the sixteen rows of B at b (ldb apart) to dst transposed:
// dst[16d + r] = b[r·ldb + d].
func packT16(dst, b []float32, ldb, n int) {
	dst = dst[:16*n]
	for r := range 16 {
		row := b[r*ldb:][:n]
		for d, v := range row {
			dst[16*d+r] = v
		}
	}
}

// dotPlan is DotUnitary's plan for n values of a y that starts at address y: tr values before the
// 16-byte boundary (into lane 0), n16 sixteens, n4 fours and n1 values after them (into lane 0).
func dotPlan(y uintptr, n int) (tr, n16, n4, n1 int) {
	if off := int(y % 16); off != 0 {
		tr = min(n, (16-off)/4)
	}
	rest := n - tr
	return tr, rest / 16, rest % 16 / 4, rest % 4
}
