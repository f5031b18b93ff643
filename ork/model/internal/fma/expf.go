package fma

import "math"

// Expf is one lane of ggml_v_expf (AVX2 + FMA), ggml's vectorized exponential: x reduced by a multiple of
// ln 2 with FMA, a polynomial, and the power of two put in the exponent; accurate to about 1.5 ulp, so
// not always expf's result. Far below zero it is 0.
func Expf(x float32) float32 {
	const r = 0x1.8p23
	z := F32(x, 0x1.715476p+0, r)
	n := z - r
	b := F32(-n, 0x1.7f7d1cp-20, F32(-n, 0x1.62e4p-1, x))
	e := math.Float32bits(z) << 23
	k := math.Float32frombits(e + math.Float32bits(1))
	u := b * b
	j := F32(F32(F32(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, F32(0x1.555e66p-3, b, 0x1.fffdb6p-2)), u, 0x1.ffffecp-1*b)
	an := float32(math.Abs(float64(n)))
	if !(an > 126) {
		return F32(j, k, k)
	}
	var g uint32
	if n <= 0 {
		g = 0x82000000
	}
	s1 := math.Float32frombits(g + 0x7f000000)
	if an > 192 {
		return s1 * s1
	}
	s2 := math.Float32frombits(e - g)
	return F32(s2, j, s2) * s1
}

// SiLU sets y[i] = x[i]/(1 + Expf(0 − x[i])), ggml_v_silu, times g[i] when g is not nil (ggml_vec_swiglu_f32:
// silu(x)·g, the product rounded once more); y may be x or g. len(x) must be a multiple of 8 (ggml's
// vector loop: the last len%8 values of a row are the caller's, with the C library's expf), y and g
// (when not nil) at least as long. With AVX2 and FMA it runs in a kernel, ggml_v_expf's operations in
// its order: the same bits.
func SiLU(y, x, g []float32) {
	if len(x)%8 != 0 || len(y) < len(x) || (g != nil && len(g) < len(x)) {
		panic("fma: SiLU wants len(x) a multiple of 8 and y and g at least as long")
	}
	if len(x) == 0 {
		return
	}
	if available {
		var gp *float32
		if g != nil {
			gp = &g[0]
		}
		silu(&y[0], &x[0], gp, len(x))
		return
	}
	for i, v := range x {
		s := v / (1 + Expf(0-v))
		if g != nil {
			s *= g[i]
		}
		y[i] = s
	}
}
