package sgemm

import "unsafe"

// transposedShape reports whether the transposed kernel (dotT16 on AVX-512, dotT8 on AVX2) takes the
// products the others do not: rows of B whose starts share one alignment (ldb a multiple of four
// values), so that every output of a group of rows follows the same DotUnitary plan, whatever K and
// wherever B starts (attention's products over heads narrower than sixteen, for one).
func (p *product) transposedShape() bool { return available && p.ldb%4 == 0 }

// transposedGroup is the rows of B the transposed kernel sums at once: sixteen on AVX-512, eight on
// AVX2.
func transposedGroup() int {
	if available512 {
		return 16
	}
	return 8
}

// transposed computes the outputs of columns [j0, j1), a multiple of transposedGroup: for each group
// of rows of B and each slice of K, the group's slice packed transposed (packT), then every row of A
// against it (dotT16 or dotT8), the slices added to C in order.
func (p *product) transposed(j0, j1 int) {
	if j0 == j1 {
		return
	}
	g := transposedGroup()
	size := g * min(p.slice, p.k)
	buf, _ := packBufs.Get().(*[]float32)
	if buf == nil || cap(*buf) < size {
		b := make([]float32, size)
		buf = &b
	}
	defer packBufs.Put(buf)
	pb := (*buf)[:size]
	for j := j0; j < j1; j += g {
		for k0 := 0; k0 < p.k; k0 += p.slice {
			n := min(p.slice, p.k-k0)
			packT(pb, p.b[j*p.ldb+k0:], g, p.ldb, n)
			tr, n16, n4, n1 := dotPlan(uintptr(unsafe.Pointer(&p.b[j*p.ldb+k0])), n)
			for i := range p.m {
				if g == 16 {
					dotT16(&p.a[i*p.lda+k0], &pb[0], &p.c[i*p.ldc+j], tr, n16, n4, n1)
				} else {
					dotT8(&p.a[i*p.lda+k0], &pb[0], &p.c[i*p.ldc+j], tr, n16, n4, n1)
				}
			}
		}
	}
}

// packT writes the first n values of the g rows of B at b (ldb apart) to dst transposed:
// dst[g·d + r] = b[r·ldb + d].
func packT(dst, b []float32, g, ldb, n int) {
	dst = dst[:g*n]
	for r := range g {
		row := b[r*ldb:][:n]
		for d, v := range row {
			dst[g*d+r] = v
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
