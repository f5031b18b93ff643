package model

import (
	"math"

	"orkpipe/ork/model/internal/fma"
)

// Element-wise kernels of ggml's CPU backend as the reference build (AVX2 + FMA) computes them; see
// ggmldot.go.

// expf64 stands for the C library's expf: the float64 exponential rounded to float32 (correctly
// rounded; glibc's expf differs in the last bit for about 0.06% of arguments).
func expf64(x float32) float32 { return float32(math.Exp(float64(x))) }

// siluRow is ggml_vec_silu_f32 over one row: x/(1 + expf(0−x)) with ggml_v_expf for the groups of 8
// (the AVX2 loop: fma.SiLU), with the C library's expf for the last len%8 values. y may be x.
func siluRow(y, x []float32) {
	simd := len(x) &^ 7
	fma.SiLU(y[:simd], x[:simd], nil)
	for i := simd; i < len(x); i++ {
		y[i] = x[i] / (1 + expf64(-x[i]))
	}
}

// swigluRow is ggml_vec_swiglu_f32 over one row: siluRow(g)·u, into y (which may be g or u).
func swigluRow(y, g, u []float32) {
	simd := len(g) &^ 7
	fma.SiLU(y[:simd], g[:simd], u[:simd])
	for i := simd; i < len(g); i++ {
		y[i] = g[i] / (1 + expf64(-g[i])) * u[i]
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
