package fma

import "golang.org/x/sys/cpu"

// available says whether the kernels (lanes8, lanes32, q8Lanes) may run: AVX2 and FMA. A variable so
// that tests and benchmarks can run both paths.
var available = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// available16 says whether the binary16 kernels (round16, axpyRound16, scaleRound16) may run: AVX2,
// FMA and F16C.
var available16 = available && cpu.X86.HasF16C

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

// axpyRows is AxpyRows over the first w columns of acc (a positive multiple of 8) and n rows
// (positive) of v, stride values apart. AVX2, FMA.
//
//go:noescape
func axpyRows(acc, v *float32, w, stride int, p *float32, n int)

// round16 is Round16 over n values (a positive multiple of 8). AVX2, F16C.
//
//go:noescape
func round16(x *float32, n int)

// axpyRound16 is AxpyRound16 over n values (a positive multiple of 8). AVX2, FMA, F16C.
//
//go:noescape
func axpyRound16(acc, v *float32, n int, p float32)

// scaleRound16 is ScaleRound16 over n values (a positive multiple of 8). AVX2, F16C.
//
//go:noescape
func scaleRound16(x *float32, n int, s float32)

// silu is SiLU over n values (a positive multiple of 8); gate (SiLU's g) may be nil. AVX2, FMA.
//
//go:noescape
func silu(y, x, gate *float32, n int)

// scale is Scale over n values (a positive multiple of 8). AVX2.
//
//go:noescape
func scale(x *float32, n int, s float32)

// q8Lanes4 is Q8Lanes4 over n (positive) blocks: x0..x3 the inputs' int16 codes, d0..d3 their scales.
// AVX2, FMA.
//
//go:noescape
func q8Lanes4(wq *int8, wd *float32, x0, x1, x2, x3 *int16, d0, d1, d2, d3 *float32, n int, acc *[4][8]float32)

// dot8 is Dot8 over the n values (a positive multiple of 8) at w and x. AVX2, FMA.
//
//go:noescape
func dot8(w, x *float32, n int) float32
