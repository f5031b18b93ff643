package fma

// Lanes8 adds to each lane j of acc the products w[8l+j]·x[8l+j] for l = 0, 1, ... in order, each
// with one rounding (acc[j] = F32(w[8l+j], x[8l+j], acc[j])): an 8-lane FMA accumulator as ggml's
// AVX2 code keeps one. len(w) must be a multiple of 8 and len(x) at least len(w). With AVX2 and FMA
// it runs in a kernel (VFMADD231PS, the same bits as F32).
func Lanes8(w, x []float32, acc *[8]float32) {
	if len(w)%8 != 0 || len(x) < len(w) {
		panic("fma: Lanes8 wants len(w) a multiple of 8 and len(x) >= len(w)")
	}
	if len(w) == 0 {
		return
	}
	if available {
		lanes8(&w[0], &x[0], len(w), acc)
		return
	}
	lanes8Go(w, x, acc)
}

// lanes8Go is Lanes8 in Go.
func lanes8Go(w, x []float32, acc *[8]float32) {
	for l := 0; l < len(w); l += 8 {
		for j := range acc {
			acc[j] = F32(w[l+j], x[l+j], acc[j])
		}
	}
}

// Lanes32 is Lanes8 for four 8-lane accumulators over blocks of 32 values: acc[j][l] takes the
// products w[32i+8j+l]·x[32i+8j+l] for i = 0, 1, ... in order (ggml_vec_dot_f32's and _f16's four
// accumulators). len(w) must be a multiple of 32 and len(x) at least len(w).
func Lanes32(w, x []float32, acc *[4][8]float32) {
	if len(w)%32 != 0 || len(x) < len(w) {
		panic("fma: Lanes32 wants len(w) a multiple of 32 and len(x) >= len(w)")
	}
	if len(w) == 0 {
		return
	}
	if available {
		lanes32(&w[0], &x[0], len(w), acc)
		return
	}
	lanes32Go(w, x, acc)
}

// lanes32Go is Lanes32 in Go.
func lanes32Go(w, x []float32, acc *[4][8]float32) {
	for i := 0; i < len(w); i += 32 {
		for j := range acc {
			for l := range acc[j] {
				acc[j][l] = F32(w[i+8*j+l], x[i+8*j+l], acc[j][l])
			}
		}
	}
}

// Q8Lanes is ggml's Q8_0 dot product's 8-lane accumulation: for each block b of 32 codes (len(wd)
// blocks; wq and xq hold at least 32 codes a block, wd and xd a scale each), lane j takes
// F32(wd[b]·xd[b], s, acc[j]), s the exact integer sum of the four products of codes 32b+4j to
// 32b+4j+3 (as float32: at most 4·128², exact). With AVX2 and FMA it runs in a kernel, the same bits.
func Q8Lanes(wq, xq []int8, wd, xd []float32, acc *[8]float32) {
	n := len(wd)
	if len(xd) < n || len(wq) < 32*n || len(xq) < 32*n {
		panic("fma: Q8Lanes wants 32 codes of w and x and a scale of x for each scale of w")
	}
	if n == 0 {
		return
	}
	if available {
		q8Lanes(&wq[0], &xq[0], &wd[0], &xd[0], n, acc)
		return
	}
	q8LanesGo(wq, xq, wd, xd, acc)
}

// q8LanesGo is Q8Lanes in Go, for x's codes as int8 or (Q8Lanes4's) int16.
func q8LanesGo[X int8 | int16](wq []int8, xq []X, wd, xd []float32, acc *[8]float32) {
	for b := range wd {
		d := wd[b] * xd[b]
		w, x := wq[32*b:32*b+32], xq[32*b:32*b+32]
		for j := range acc {
			s := int32(w[4*j])*int32(x[4*j]) + int32(w[4*j+1])*int32(x[4*j+1]) +
				int32(w[4*j+2])*int32(x[4*j+2]) + int32(w[4*j+3])*int32(x[4*j+3])
			acc[j] = F32(d, float32(s), acc[j])
		}
	}
}

// Q8Lanes4 is Q8Lanes for one weight row and four inputs: acc[t] takes what Q8Lanes(wq, x_t, wd, xd[t], &acc[t])
// would, x_t being xq[t]'s codes (held as int16, widened once for every weight row the input meets).
// Each xq[t] must hold 32 codes, and each xd[t] a scale, for each scale of wd; an input may appear more
// than once. With AVX2 and FMA it runs in a kernel that widens each block of w once for the four
// inputs: the same bits.
func Q8Lanes4(wq []int8, wd []float32, xq *[4][]int16, xd *[4][]float32, acc *[4][8]float32) {
	n := len(wd)
	if len(wq) < 32*n {
		panic("fma: Q8Lanes4 wants 32 codes of w for each scale")
	}
	for t := range xq {
		if len(xq[t]) < 32*n || len(xd[t]) < n {
			panic("fma: Q8Lanes4 wants 32 codes and a scale of each input for each scale of w")
		}
	}
	if n == 0 {
		return
	}
	if available {
		q8Lanes4(&wq[0], &wd[0], &xq[0][0], &xq[1][0], &xq[2][0], &xq[3][0], &xd[0][0], &xd[1][0], &xd[2][0], &xd[3][0], n, acc)
		return
	}
	for t := range acc {
		q8LanesGo(wq, xq[t], wd, xd[t], &acc[t])
	}
}

// Hsum8 is the horizontal sum of an 8-lane accumulator as ggml's hsum_float_8 and llamafile's hsum
// compute it: the high half added to the low half, then lanes (0+2, 1+3), then their sum.
func Hsum8(v *[8]float32) float32 {
	a0, a1, a2, a3 := v[4]+v[0], v[5]+v[1], v[6]+v[2], v[7]+v[3]
	return (a0 + a2) + (a1 + a3)
}

// Dot8 is Hsum8 of Lanes8(w, x) from a zero accumulator: llamafile's tinyBLAS dot product for one
// output. len(w) must be a multiple of 8 and len(x) at least len(w). With AVX2 and FMA it runs in one
// kernel, the horizontal sum included (in registers: no round trip of the accumulator through
// memory), the same bits.
func Dot8(w, x []float32) float32 {
	if len(w)%8 != 0 || len(x) < len(w) {
		panic("fma: Dot8 wants len(w) a multiple of 8 and len(x) >= len(w)")
	}
	if len(w) == 0 {
		return 0
	}
	if available {
		return dot8(&w[0], &x[0], len(w))
	}
	var acc [8]float32
	lanes8Go(w, x, &acc)
	return Hsum8(&acc)
}
