package quant

import (
	"math"

	"orkpipe/ork/quant/internal/kernel"
)

// chooseScaleGPTQ returns the float32 scale f·amax/qmax of the factor f in grid (signed, see
// config.scaleFactors) with the least GPTQ loss over the group x: its columns c0, c0+1, ... of the
// row quantized in order, each one's error e_a = (x_a − q_a)/U[a][a] pushed onto the later columns
// of the group (x_b −= e_a·U[a][b]) as GPTQ's row phase does, and the loss Σ e_a². U is the upper
// factor of H⁻¹, row-major kp x kp. Ties keep the earlier factor; a factor whose float32 scale is 0
// is skipped; an all-zero group has scale 0. buf holds at least len(x) values; with 8·len(x) the
// candidates run eight at a time in kernel.GPTQScales8 (AVX-512) or kernel.GPTQScales8AVX2 (the
// same scale).
// Arithmetic is float64 in a fixed order without fused multiply-add, so the choice is the same on
// every machine.
func chooseScaleGPTQ(x, U []float64, kp, c0, bits int, grid, buf []float64) float32 {
	amax := groupAmax(x)
	if amax == 0 {
		return 0
	}
	if gptqScales8 != gptqScalesGo && len(buf) >= 8*len(x) {
		return chooseScaleGPTQ8(x, U, kp, c0, bits, grid, amax, buf)
	}
	lo, hi := codeRange(bits)
	flo, fhi := float64(lo), float64(hi)
	n := len(x)
	buf = buf[:n]
	best, bestErr := float32(0), math.Inf(1)
	for _, f := range grid {
		s := float32(f * amax / qmax(bits))
		if s == 0 {
			continue
		}
		sc, inv := float64(s), 1/float64(s)
		copy(buf, x)
		e := 0.0
		for a := 0; a < n && e < bestErr; a++ {
			urow := U[(c0+a)*kp+c0 : (c0+a)*kp+c0+n]
			r := float64(buf[a]-float64(quantCode(buf[a], inv, flo, fhi)*sc)) / urow[a]
			e += float64(r * r)
			if r != 0 {
				subScaled(buf[a+1:], urow[a+1:], r) // buf[b] -= r·U[a][b], the product rounded first
			}
		}
		if e < bestErr {
			best, bestErr = s, e
		}
	}
	return best
}

// gptqScales8 says which kernel chooseScaleGPTQ runs eight candidates at a time with:
// kernel.GPTQScales8 (AVX-512), kernel.GPTQScales8AVX2, or none (given a scratch of fewer
// than 8·len(x) values it runs the scalar loop, which is how the tests compare the two).
var gptqScales8 = func() int {
	switch {
	case kernel.Available512:
		return gptqScalesAVX512
	case kernel.Available:
		return gptqScalesAVX2
	}
	return gptqScalesGo
}()

// The kernels of gptqScales8.
const (
	gptqScalesGo = iota
	gptqScalesAVX2
	gptqScalesAVX512
)

// chooseScaleGPTQ8 is chooseScaleGPTQ's choice for a group whose amax is not 0, with the candidates
// eight at a time in the lanes of kernel.GPTQScales8 or kernel.GPTQScales8AVX2 (gptqScales8; their
// lanes past the grid, and those whose float32 scale is 0, get scale and inverse 0 and are not
// chosen). Each lane's loss is the scalar
// loop's to the bit, so the choice is too. buf holds at least 8·len(x) values.
func chooseScaleGPTQ8(x, U []float64, kp, c0, bits int, grid []float64, amax float64, buf []float64) float32 {
	lo, hi := codeRange(bits)
	lohi := [2]float64{float64(lo), float64(hi)}
	best, bestErr := float32(0), math.Inf(1)
	var s, inv, errs [8]float64
	var sc [8]float32
	for j0 := 0; j0 < len(grid); j0 += 8 {
		lanes := min(8, len(grid)-j0)
		for j := range 8 {
			s[j], inv[j], sc[j] = 0, 0, 0
			if j < lanes {
				if sc[j] = float32(grid[j0+j] * amax / qmax(bits)); sc[j] != 0 {
					s[j], inv[j] = float64(sc[j]), 1/float64(sc[j])
				}
			}
		}
		if gptqScales8 == gptqScalesAVX512 {
			kernel.GPTQScales8(&x[0], len(x), &U[c0*kp+c0], kp, &s, &inv, &lohi, &buf[0], &errs)
		} else {
			kernel.GPTQScales8AVX2(&x[0], len(x), &U[c0*kp+c0], kp, &s, &inv, &lohi, &buf[0], &errs)
		}
		for j := range lanes {
			if sc[j] != 0 && errs[j] < bestErr {
				best, bestErr = sc[j], errs[j]
			}
		}
	}
	return best
}
