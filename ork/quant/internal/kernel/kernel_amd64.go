package kernel

import "golang.org/x/sys/cpu"

// Available says whether the kernels may run: AVX2 (x/sys/cpu also checks that the OS saves the
// YMM registers).
var Available = cpu.X86.HasAVX2

// ClipErrs8 sets errs[j], for the eight candidates j (s, inv and errs point at 8 values each), to
// Σ_k wd_k·d·d (wd nil: d·d) with d = x_k − q·s_j, q = clamp(round-half-away(x_k·inv_j), lo, hi)
// (lohi = {lo, hi}), summed over the n values at x in order from k = 0, without fused
// multiply-adds.
//
//go:noescape
func ClipErrs8(x, wd *float64, n int, s, inv *float64, lohi *[2]float64, errs *float64)

// ClipErrs4 is ClipErrs8 for four candidates.
//
//go:noescape
func ClipErrs4(x, wd *float64, n int, s, inv *float64, lohi *[2]float64, errs *float64)

// AbsMax4 returns max |x_k| over the n values at x, n a positive multiple of 4.
//
//go:noescape
func AbsMax4(x *float64, n int) float64

// QuantCodes4 sets codes[k] = clamp(round-half-away(x_k·inv), lo, hi) for the n values at x, n a
// positive multiple of 4.
//
//go:noescape
func QuantCodes4(x *float64, n int, inv float64, lohi *[2]float64, codes *int8)

// SubScaled sets y[j] = y[j] − e·x[j] for the n values at y and x (the product rounded, then the
// difference: no fused multiply-add).
//
//go:noescape
func SubScaled(y, x *float64, n int, e float64)
