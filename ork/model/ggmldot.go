package model

import (
	"math"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model/internal/fma"
)

// The dot products of ggml's CPU backend (AVX2 + FMA + F16C build, the reference llama.cpp of
// ../shared/testdata/SOURCES.md), reproduced operation by operation so that a ggml-exact forward pass
// ([Model.GGMLExact]) rounds every output as llama.cpp does. SIMD lanes are emulated: an 8-lane
// accumulator is [8]float32, a fused multiply-add is fma32 (fma.F32, exact); the loops ggml runs on
// vectors (the 8-lane accumulations of dotQ8_0, dotTiny, dotVecF16 and dotVecF32, flash attention's
// products and binary16 accumulator, the DeltaNet state update, SiLU) are package fma's, which runs them
// in AVX2 kernels where the CPU has FMA.

// fma32 is a float32 fused multiply-add, a·b + c rounded once (as vfmadd*ps): fma.F32, exact.
func fma32(a, b, c float32) float32 { return fma.F32(a, b, c) }

// hsum8 is the horizontal sum of an 8-lane accumulator as ggml's hsum_float_8 and llamafile's hsum
// compute it: the high half added to the low half, then lanes (0+2, 1+3), then their sum.
func hsum8(v *[8]float32) float32 { return fma.Hsum8(v) }

// reduce4x8 is GGML_F32x8_REDUCE over four 8-lane accumulators (ggml_vec_dot_f32/_f16): s0+s2, s1+s3,
// then their sum, then the high half added to the low half and two horizontal pair additions.
func reduce4x8(s *[4][8]float32) float32 {
	var x [8]float32
	for i := range x {
		x[i] = (s[0][i] + s[2][i]) + (s[1][i] + s[3][i])
	}
	t0, t1, t2, t3 := x[0]+x[4], x[1]+x[5], x[2]+x[6], x[3]+x[7]
	return (t0 + t1) + (t2 + t3)
}

// q8Row is one row of Q8_0 blocks as ggml's dot product reads it: 32 int8 codes and the binary16 scale
// (as float32) per block.
type q8Row struct {
	q []int8
	d []float32
}

// quantizeQ8_0AVX2 encodes x (whole blocks of 32) into r as ggml's AVX2 quantize_row_q8_0 does for
// activations: d = max|x|/127 stored as binary16, codes round-to-nearest-even(x · (127/max|x|)).
func quantizeQ8_0AVX2(r q8Row, x []float32) {
	for b := 0; b*32 < len(x); b++ {
		xb := x[b*32 : (b+1)*32]
		var amax float32
		for _, v := range xb {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		r.d[b] = gguf.F16ToF32(gguf.F32ToF16(amax / 127))
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		for i, v := range xb {
			r.q[b*32+i] = int8(math.RoundToEven(float64(v * id)))
		}
	}
}

// dotQ8_0 is ggml_vec_dot_q8_0_q8_0 (AVX2) and llamafile's tinyBLAS_Q0_AVX for one output: per block,
// lane j holds the exact integer sum of codes 4j..4j+3, and the lanes accumulate d_w·d_x·sum with FMA;
// then hsum8. ggml's integer sums are exact too, a weight code of -128 included: its |w| (VPSIGNB) is
// 128 read unsigned by VPMADDUBSW, the activation codes quantize_row_q8_0 makes are within [-127, 127]
// (so sign(x, w) cannot overflow), and a pair of products is at most 2·128·127 = 32512, within int16.
func dotQ8_0(w, x q8Row) float32 {
	var acc [8]float32
	fma.Q8Lanes(w.q, x.q, w.d, x.d, &acc)
	return hsum8(&acc)
}

// dotsQ8_0 is dotQ8_0 of the weight row w against four inputs at once (fma.Q8Lanes4: w's blocks widened
// once for the four), the inputs' codes held as int16: out[t] = dotQ8_0(w, x_t), the same bits.
func dotsQ8_0(out *[4]float32, w q8Row, xq *[4][]int16, xd *[4][]float32) {
	var acc [4][8]float32
	fma.Q8Lanes4(w.q, w.d, xq, xd, &acc)
	for t := range out {
		out[t] = hsum8(&acc[t])
	}
}

// dotTiny is llamafile's tinyBLAS (F32 and F16 weights, AVX2) for one output: lane j accumulates
// w[8l+j]·x[8l+j] with FMA over l, then hsum8. len(w) is a multiple of 8.
func dotTiny(w, x []float32) float32 { return fma.Dot8(w, x) }

// dotVecF16 is ggml_vec_dot_f16 (AVX2) over values that are binary16: four 8-lane FMA accumulators over
// the first len &^ 31 values, reduce4x8, then the rest as float32 products summed in float64.
func dotVecF16(w, x []float32) float32 {
	var s [4][8]float32
	np := len(w) &^ 31
	fma.Lanes32(w[:np], x, &s)
	sum := float64(reduce4x8(&s))
	for i := np; i < len(w); i++ {
		sum += float64(w[i] * x[i])
	}
	return float32(sum)
}

// dotVecF32 is ggml_vec_dot_f32 as the reference build compiled it (AVX2): four 8-lane FMA accumulators
// over the first len &^ 31 values, reduce4x8 into a float32 sum, then the rest: groups of 8 and then of
// 4 as rounded products added one by one, the last 0-3 values with scalar FMA.
func dotVecF32(w, x []float32) float32 {
	var s [4][8]float32
	n := len(w)
	np := n &^ 31
	fma.Lanes32(w[:np], x, &s)
	var sum float32
	if np > 0 {
		sum = reduce4x8(&s)
	}
	return sumTail(w[np:], x[np:], sum)
}

// sumTail adds the products w[i]·x[i] to sum as GCC vectorized ggml's plain C loops "sum += w[i]*x[i]"
// (the tail of ggml_vec_dot_f32, the taps of ggml_ssm_conv): groups of 8 and then of 4 as rounded
// products added one by one, the last 0-3 values with scalar FMA.
func sumTail(w, x []float32, sum float32) float32 {
	n := len(w)
	i := 0
	if n >= 8 {
		for ; i+8 <= n; i += 8 {
			for l := 0; l < 8; l++ {
				sum += w[i+l] * x[i+l]
			}
		}
	}
	if n-i >= 4 {
		for l := 0; l < 4; l++ {
			sum += w[i+l] * x[i+l]
		}
		i += 4
	}
	for ; i < n; i++ {
		sum = fma32(w[i], x[i], sum)
	}
	return sum
}
