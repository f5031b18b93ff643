package calib

import "golang.org/x/sys/cpu"

// hasF32Kernel: Hessian values are converted to float32 by f64ToF32AVX2 (AVX2) before the Go loop.
var hasF32Kernel = cpu.X86.HasAVX2

// f64ToF32AVX2 converts a prefix of src (see the assembly) and returns its length.
//
//go:noescape
func f64ToF32AVX2(dst *byte, src *float64, n int) int

// f32Kernel converts the longest prefix of src (a multiple of eight values) that holds no value whose
// float32 is an Inf or a NaN into dst (little-endian float32, bit for bit float32(x)) and returns its
// length; 0 without AVX2.
func f32Kernel(dst []byte, src []float64) int {
	if !hasF32Kernel || len(src) < 8 {
		return 0
	}
	_ = dst[4*len(src)-1]
	return f64ToF32AVX2(&dst[0], &src[0], len(src))
}
