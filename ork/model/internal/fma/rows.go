package fma

import "orkpipe/ork/gguf"

// AxpyRows adds to each value j of acc the products v[c·stride+j]·p[c] for c = 0, 1, ... in order,
// each with one rounding (acc[j] = F32(v[c·stride+j], p[c], acc[j])): ggml's simd_gemm, whose
// accumulators are columns of the output and whose sums run down the rows of B (flash attention's
// scores against a tile of keys laid out transposed, and its V accumulation). v must hold
// (len(p)−1)·stride + len(acc) values. With AVX2 and FMA the whole eights of acc run in a kernel
// (VFMADD231PS, the same bits as F32), the rest in Go.
func AxpyRows(acc, v []float32, stride int, p []float32) {
	if len(p) == 0 || len(acc) == 0 {
		return
	}
	if stride < len(acc) || len(v) < (len(p)-1)*stride+len(acc) {
		panic("fma: AxpyRows wants stride >= len(acc) and len(v) >= (len(p)-1)*stride + len(acc)")
	}
	w := 0
	if available {
		w = len(acc) &^ 7
		if w > 0 {
			axpyRows(&acc[0], &v[0], w, stride, &p[0], len(p))
		}
	}
	for c, pc := range p {
		row := v[c*stride : c*stride+len(acc)]
		for j := w; j < len(acc); j++ {
			acc[j] = F32(row[j], pc, acc[j])
		}
	}
}

// Scale multiplies every value of x by s (ggml_vec_scale_f32: one rounding each, as in Go). With AVX2
// the whole eights run in a kernel (VMULPS).
func Scale(x []float32, s float32) {
	n := 0
	if available {
		n = len(x) &^ 7
		if n > 0 {
			scale(&x[0], n, s)
		}
	}
	for i := n; i < len(x); i++ {
		x[i] *= s
	}
}

// Round16 rounds every value of x in place to the nearest binary16 value (ties to even; beyond
// binary16's range ±Inf, below it binary16's subnormals or zero), as ggml stores F16: the value of
// gguf.F16ToF32(gguf.F32ToF16(x)). With AVX2 and F16C the whole eights run in a kernel (VCVTPS2PH
// and back, the same bits, a NaN's payload aside).
func Round16(x []float32) {
	n := 0
	if available16 {
		n = len(x) &^ 7
		if n > 0 {
			round16(&x[0], n)
		}
	}
	for i := n; i < len(x); i++ {
		x[i] = half(x[i])
	}
}

// AxpyRound16 is ggml_vec_mad_f16 with its accumulator in binary16: acc[j] = the binary16 rounding
// of F32(v[j], p, acc[j]). len(v) must be at least len(acc). With AVX2, FMA and F16C the whole
// eights run in a kernel, the same bits.
func AxpyRound16(acc, v []float32, p float32) {
	if len(v) < len(acc) {
		panic("fma: AxpyRound16 wants len(v) >= len(acc)")
	}
	n := 0
	if available16 {
		n = len(acc) &^ 7
		if n > 0 {
			axpyRound16(&acc[0], &v[0], n, p)
		}
	}
	for j := n; j < len(acc); j++ {
		acc[j] = half(F32(v[j], p, acc[j]))
	}
}

// ScaleRound16 is ggml_vec_scale_f16: x[j] = the binary16 rounding of x[j]·s (the product rounded
// to float32 first, as the AVX2 code multiplies in float32). With AVX2 and F16C the whole eights run
// in a kernel, the same bits.
func ScaleRound16(x []float32, s float32) {
	n := 0
	if available16 {
		n = len(x) &^ 7
		if n > 0 {
			scaleRound16(&x[0], n, s)
		}
	}
	for j := n; j < len(x); j++ {
		x[j] = half(x[j] * s)
	}
}

// half rounds x to the nearest binary16 value (ties to even).
func half(x float32) float32 { return gguf.F16ToF32(gguf.F32ToF16(x)) }
