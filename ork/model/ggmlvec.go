package model

import "math"

// Element-wise kernels of ggml's CPU backend as the reference build (AVX2 + FMA) computes them; see
// ggmldot.go.

// vExpf is one lane of ggml_v_expf (AVX2), ggml's vectorized exponential: x reduced by a multiple of
// ln 2 with FMA, a polynomial, and the power of two put in the exponent; accurate to about 1.5 ulp, so
// not always expf's result. Far below zero it is 0.
func vExpf(x float32) float32 {
	const r = 0x1.8p23
	z := fma32(x, 0x1.715476p+0, r)
	n := z - r
	b := fma32(-n, 0x1.7f7d1cp-20, fma32(-n, 0x1.62e4p-1, x))
	e := math.Float32bits(z) << 23
	k := math.Float32frombits(e + math.Float32bits(1))
	u := b * b
	j := fma32(fma32(fma32(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, fma32(0x1.555e66p-3, b, 0x1.fffdb6p-2)), u, 0x1.ffffecp-1*b)
	an := float32(math.Abs(float64(n)))
	if !(an > 126) {
		return fma32(j, k, k)
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
	return fma32(s2, j, s2) * s1
}

// expf64 stands for the C library's expf: the float64 exponential rounded to float32 (correctly
// rounded; glibc's expf differs in the last bit for about 0.06% of arguments).
func expf64(x float32) float32 { return float32(math.Exp(float64(x))) }

// siluRow is ggml_vec_silu_f32 over one row: x/(1 + vExpf(-x)) for the groups of 8 (the AVX2 loop),
// x/(1 + expf(-x)) for the last len%8 values. y may be x.
func siluRow(y, x []float32) {
	simd := len(x) &^ 7
	for i, v := range x {
		if i < simd {
			y[i] = v / (1 + vExpf(0-v))
		} else {
			y[i] = v / (1 + expf64(-v))
		}
	}
}

// swigluRow is ggml_vec_swiglu_f32 over one row: siluRow(g)·u, into y (which may be g or u).
func swigluRow(y, g, u []float32) {
	simd := len(g) &^ 7
	for i, v := range g {
		if i < simd {
			y[i] = v / (1 + vExpf(0-v)) * u[i]
		} else {
			y[i] = v / (1 + expf64(-v)) * u[i]
		}
	}
}

// rmsNormGGML is ggml_rms_norm followed by ggml_mul with w, over rows of n values: the squares rounded
// to float32 and summed in float64 (rmsNorm sums exact squares).
func rmsNormGGML(dst, src, w []float32, n int, eps float32) {
	for r := 0; r+n <= len(src); r += n {
		row := src[r : r+n]
		var ss float64
		for _, v := range row {
			ss += float64(v * v)
		}
		mean := float32(ss / float64(n))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		out := dst[r : r+n]
		for i, v := range row {
			out[i] = v * scale * w[i]
		}
	}
}
