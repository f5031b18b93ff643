// Package fma computes float32 arithmetic exactly as ggml's AVX2 + FMA kernels do. F32 is a fused
// multiply-add (a·b + c rounded once to float32) in Go on any CPU; the rest are the loops ggml runs on
// vectors, each with a kernel where the CPU has AVX2 and FMA (F16C for the binary16 ones) and a Go loop
// elsewhere, the same bits either way (a NaN's payload aside):
//
//   - Lanes8, Lanes32, Q8Lanes, Q8Lanes4: the lane-wise accumulations of ggml's dot products (one or four
//     8-lane accumulators; Q8_0 blocks, one input or four against a weight row); Hsum8 their horizontal
//     sum, Dot8 the two in one kernel (llamafile's tinyBLAS dot product).
//   - AxpyRows: simd_gemm's FMA chains down the rows of B (flash attention's scores and V sums, Gated
//     DeltaNet's state update); Scale: ggml_vec_scale_f32 (the state's decay).
//   - Round16, AxpyRound16, ScaleRound16: values rounded to binary16 (the F16 K/V cache, the one-chunk
//     flash-attention kernel's binary16 accumulator).
//   - Expf, SiLU: ggml_v_expf and ggml_v_silu (SiLU and SwiGLU rows).
//
// ork/model's ggml-exact forward pass computes with it what llama.cpp's AVX2 build computes.
package fma

import "math"

// F32 returns a·b + c rounded once to float32 (round to nearest, ties to even), as vfmadd*ps computes
// it. The product of two float32 values is exact in float64 and their sum s = p + c rounded to
// float64 differs from the exact sum by less than half a float64 ulp, so rounding s to float32 gives
// the exact sum's rounding except when s falls exactly on a midpoint between two float32 values (the
// exact sum then lies on one side of it): there the float64 rounding error (TwoSum) decides the side.
func F32(a, b, c float32) float32 {
	if r, ok := fast(a, b, c); ok {
		return r
	}
	return f32Rare(a, b, c, float64(a)*float64(b)+float64(c))
}

// fast returns F32(a, b, c) and true where the float64 sum settles it (all but about one sum in 2^29,
// and those in float32's subnormal range), else false.
func fast(a, b, c float32) (float32, bool) {
	s := float64(a)*float64(b) + float64(c) // the product exact: fused or not, the same s
	bits := math.Float64bits(s)
	return float32(s), bits&(1<<29-1) != 1<<28 && bits>>52&0x7ff >= 1023-126
}

// f32Rare is F32 where s = a·b + c rounded to float64 may be a float32 midpoint, or lies in float32's
// subnormal range (or is NaN).
func f32Rare(a, b, c float32, s float64) float32 {
	p, cf := float64(a)*float64(b), float64(c)
	r := float32(s)
	if float64(r) == s || s != s || math.IsInf(s, 0) {
		return r
	}
	bb := s - p
	err := (p - (s - bb)) + (cf - bb)
	if err == 0 {
		return r
	}
	lo, hi := neighbours(r, s)
	if s != lo/2+hi/2 {
		return r
	}
	if err > 0 {
		return toF32(hi)
	}
	return toF32(lo)
}

// maxPlusUlp is math.MaxFloat32 plus its ulp, 2^128: the upper neighbour that makes the overflow
// boundary a midpoint (sums at or past it round to Inf).
var maxPlusUlp = math.Ldexp(1, 128)

// neighbours returns the float32 values lo < s < hi around s (not a float32 value) as float64, r being
// s rounded to float32; beyond math.MaxFloat32 the next value is 2^128.
func neighbours(r float32, s float64) (lo, hi float64) {
	up := func(v float32) float64 {
		if v == math.MaxFloat32 {
			return maxPlusUlp
		}
		return float64(math.Nextafter32(v, float32(math.Inf(1))))
	}
	switch {
	case math.IsInf(float64(r), 1):
		return math.MaxFloat32, maxPlusUlp
	case math.IsInf(float64(r), -1):
		return -maxPlusUlp, -math.MaxFloat32
	case float64(r) < s:
		return float64(r), up(r)
	}
	return -up(-r), float64(r)
}

// toF32 converts a neighbour to float32: ±2^128 is ±Inf.
func toF32(v float64) float32 {
	if math.Abs(v) >= maxPlusUlp {
		return float32(math.Inf(int(math.Copysign(1, v))))
	}
	return float32(v)
}
