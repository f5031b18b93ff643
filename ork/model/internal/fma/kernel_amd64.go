package fma

import "golang.org/x/sys/cpu"

// available says whether the kernels (lanes8, lanes32, q8Lanes) may run: AVX2 and FMA. A variable so
// that tests and benchmarks can run both paths.
var available = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// lanes8 is Lanes8 over the n values (a positive multiple of 8) at w and x. AVX2, FMA.
//
//go:noescape
func lanes8(w, x *float32, n int, acc *[8]float32)

// lanes32 is Lanes32 over the n values (a positive multiple of 32) at w and x. AVX2, FMA.
//
//go:noescape
func lanes32(w, x *float32, n int, acc *[4][8]float32)

// q8Lanes is Q8Lanes over n (positive) blocks. AVX2, FMA.
//
//go:noescape
func q8Lanes(wq, xq *int8, wd, xd *float32, n int, acc *[8]float32)
