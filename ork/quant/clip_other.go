//go:build !amd64

package quant

import "math"

// clipKernel is false: clipErrs runs the pure-Go loops.
const clipKernel = false

func clipErrs(x, wd, s, inv, errs []float64, grid int, lo, hi float64) {
	clipErrsGo(x, wd, s[:grid], inv[:grid], errs[:grid], lo, hi)
}

// groupAmax returns max |x_k|.
func groupAmax(x []float64) float64 {
	amax := 0.0
	for _, v := range x {
		amax = max(amax, math.Abs(v))
	}
	return amax
}

// quantCodes sets codes[k] = quantCode(x[k], inv, lo, hi).
func quantCodes(codes []int8, x []float64, inv, lo, hi float64) {
	for k, v := range x {
		codes[k] = int8(quantCode(v, inv, lo, hi))
	}
}
