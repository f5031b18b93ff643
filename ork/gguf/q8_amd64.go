package gguf

import "golang.org/x/sys/cpu"

// hasQ8Kernel: Q8_0 blocks decode by dequantQ8_0AVX2 (AVX2) instead of the Go loop.
var hasQ8Kernel = cpu.X86.HasAVX2

// dequantQ8_0AVX2 decodes nb Q8_0 blocks of src into dst (32·nb values), each block's scale looked up
// in tab (f16tab), bit for bit as dequantQ8_0Go.
//
//go:noescape
func dequantQ8_0AVX2(dst *float32, src *byte, nb int, tab *float32)

// q8Kernel decodes the nb blocks of src into dst and reports true, or reports false without the
// kernel (then the caller's Go loop decodes them).
func q8Kernel(dst []float32, src []byte, nb int) bool {
	if !hasQ8Kernel || nb == 0 {
		return false
	}
	_, _ = dst[32*nb-1], src[34*nb-1]
	dequantQ8_0AVX2(&dst[0], &src[0], nb, &f16tab()[0])
	return true
}
