package gguf

import "golang.org/x/sys/cpu"

var hasF16C = cpu.X86.HasAVX2 && cpu.X86.HasF16C

// f16ToF32F16C converts halves from src (little-endian) into dst, eight at a time (VCVTPH2PS), while
// no half of a block of eight is an Inf or a NaN, for at most n values; it returns how many it
// converted (a multiple of eight).
//
//go:noescape
func f16ToF32F16C(dst *float32, src *byte, n int) int

// f16Kernel converts a prefix of dst (see f16ToF32F16C) and returns its length; 0 without F16C.
func f16Kernel(dst []float32, src []byte) int {
	if !hasF16C || len(dst) < 8 {
		return 0
	}
	return f16ToF32F16C(&dst[0], &src[0], len(dst))
}
