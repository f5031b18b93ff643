package quant

import "math"

// chooseScaleGPTQ returns the float32 scale f·amax/qmax of the factor f in grid (signed, see
// config.scaleFactors) with the least GPTQ loss over the group x: its columns c0, c0+1, ... of the
// row quantized in order, each one's error e_a = (x_a − q_a)/U[a][a] pushed onto the later columns
// of the group (x_b −= e_a·U[a][b]) as GPTQ's row phase does, and the loss Σ e_a². U is the upper
// factor of H⁻¹, row-major kp x kp. Ties keep the earlier factor; a factor whose float32 scale is 0
// is skipped; an all-zero group has scale 0. buf holds at least len(x) values. Arithmetic is float64
// in a fixed order without fused multiply-add, so the choice is the same on every machine.
func chooseScaleGPTQ(x, U []float64, kp, c0, bits int, grid, buf []float64) float32 {
	amax := groupAmax(x)
	if amax == 0 {
		return 0
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
