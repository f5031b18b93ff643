package quant

import (
	"math"

	"golang.org/x/sys/cpu"
)

// clipErrs8 is clipErrsGo for eight candidates (s, inv and errs point at 8 values each) over the
// n values at x (weights at wd, or wd nil), in the lanes of two AVX2 registers.
//
//go:noescape
func clipErrs4(x, wd *float64, n int, s, inv *float64, lohi *[2]float64, errs *float64)

//go:noescape
func clipErrs8(x, wd *float64, n int, s, inv *float64, lohi *[2]float64, errs *float64)

// clipKernel says whether clipErrs runs clipErrs8 (AVX2; x/sys/cpu also checks that the OS
// saves the YMM registers).
var clipKernel = cpu.X86.HasAVX2

// clipErrs sets errs[j] to the error of candidate j (see clipErrsGo) for the first grid candidates,
// len(s) a multiple of clipLanes (errs of the padding past grid may be left unset).
func clipErrs(x, wd, s, inv, errs []float64, grid int, lo, hi float64) {
	if !clipKernel || len(x) == 0 {
		clipErrsGo(x, wd, s[:grid], inv[:grid], errs[:grid], lo, hi)
		return
	}
	lohi := [2]float64{lo, hi}
	var pw *float64
	if wd != nil {
		pw = &wd[:len(x)][0]
	}
	for j := 0; j < grid; j += clipLanes {
		if grid-j <= clipLanes/2 {
			clipErrs4(&x[0], pw, len(x), &s[j], &inv[j], &lohi, &errs[j])
		} else {
			clipErrs8(&x[0], pw, len(x), &s[j], &inv[j], &lohi, &errs[j])
		}
	}
}

//go:noescape
func absMax4(x *float64, n int) float64

//go:noescape
func quantCodes4(x *float64, n int, inv float64, lohi *[2]float64, codes *int8)

// groupAmax returns max |x_k|.
func groupAmax(x []float64) float64 {
	n := len(x) &^ 3
	amax := 0.0
	if clipKernel && n > 0 {
		amax = absMax4(&x[0], n)
	}
	for _, v := range x[n:] {
		amax = max(amax, math.Abs(v))
	}
	return amax
}

// quantCodes sets codes[k] = quantCode(x[k], inv, lo, hi).
func quantCodes(codes []int8, x []float64, inv, lo, hi float64) {
	n := len(x) &^ 3
	if clipKernel && n > 0 {
		lohi := [2]float64{lo, hi}
		quantCodes4(&x[0], n, inv, &lohi, &codes[:n][0])
	} else {
		n = 0
	}
	for k, v := range x[n:] {
		codes[n+k] = int8(quantCode(v, inv, lo, hi))
	}
}
