package quant

import (
	"math"

	"orkpipe/ork/quant/internal/kernel"
)

// The float64 clip search's inner work — GPTQ's, and RTN's for the groups and grids its float32
// search (rtn32.go) does not take: for each candidate scale of a group, the
// (weighted) squared error of quantizing the group with it. Its arithmetic is fixed — float64,
// terms in element order, no fused multiply-add — so that the pure-Go loops here and the amd64
// kernel (internal/kernel, which evaluates eight candidates per element in the lanes of two AVX2
// registers) give bit-identical errors, hence identical choices on every machine.

// clipLanes is how many candidate scales one kernel pass evaluates.
const clipLanes = 8

// clipScratch holds a search's candidate scales, their inverses and errors, padded to whole
// passes of clipLanes. A padding or zero candidate has scale 0 and inverse 0 (its error is then
// Σ wd·x², and it is never chosen).
type clipScratch struct {
	s, inv, errs []float64
	// the AVX-512 search's grid (padded with zeros) and results (searchGroup)
	grid8, s8, errs8 [clipLanes]float64
}

func newClipScratch(grid int) *clipScratch {
	n := (grid + clipLanes - 1) / clipLanes * clipLanes
	return &clipScratch{s: make([]float64, n), inv: make([]float64, n), errs: make([]float64, n)}
}

// roundAway is math.Round (round half away from zero) through math.Trunc, which amd64 computes
// with one instruction: y − trunc(y) is exact, so the comparison with ±0.5 decides exactly as
// math.Round does, for every float64 (±Inf and NaN pass through unchanged).
func roundAway(y float64) float64 {
	t := math.Trunc(y)
	r := y - t
	if r >= 0.5 {
		t++
	} else if r <= -0.5 {
		t--
	}
	return t
}

// clipErrsGo is the reference of clipErrs: errs[j] = Σ_k wd_k·d·d (wd nil: d·d) with
// d = x_k − quantCode(x_k, inv_j)·s_j, summed over k in order from 0.
func clipErrsGo(x, wd, s, inv, errs []float64, lo, hi float64) {
	for j := range errs {
		sj, ij := s[j], inv[j]
		e := 0.0
		if wd == nil {
			for _, v := range x {
				d := v - float64(quantCode(v, ij, lo, hi)*sj)
				e += float64(d * d)
			}
		} else {
			for k, v := range x {
				d := v - float64(quantCode(v, ij, lo, hi)*sj)
				e += float64(float64(wd[k]*d) * d)
			}
		}
		errs[j] = e
	}
}

// chooseScaleErr returns the float32 scale f·amax/qmax of the grid factor f that minimises
// err = Σ wd_k (x_k − s·q_k)² (wd nil: unweighted; ties keep the earlier factor; a factor whose
// float32 scale is 0 is skipped), and that err. A negative factor gives a negative scale
// (config.scaleFactors). An all-zero group has scale 0 and err 0; a group
// no factor gives a non-zero scale has scale 0 and err Σ wd_k x_k².
func chooseScaleErr(x, wd []float64, bits int, grid []float64, cs *clipScratch) (float32, float64) {
	amax := groupAmax(x)
	if amax == 0 {
		return 0, 0
	}
	lo, hi := codeRange(bits)
	flo, fhi := float64(lo), float64(hi)
	any := false
	for j := range cs.s {
		cs.s[j], cs.inv[j] = 0, 0
		if j < len(grid) {
			if s := float32(grid[j] * amax / qmax(bits)); s != 0 {
				cs.s[j], cs.inv[j], any = float64(s), 1/float64(s), true
			}
		}
	}
	if !any {
		return 0, sqNorm(x, wd)
	}
	clipErrs(x, wd, cs.s, cs.inv, cs.errs, len(grid), flo, fhi)
	best, bestErr := float32(0), math.Inf(1)
	for j := range grid {
		if cs.s[j] != 0 && cs.errs[j] < bestErr {
			best, bestErr = float32(cs.s[j]), cs.errs[j]
		}
	}
	return best, bestErr
}

// searchGroup is chooseScaleErr and, as den, sqNorm of the group: in one AVX-512 kernel call for
// grids of five to eight factors (kernel.GroupSearch8: the same arithmetic and the same choice, bit
// for bit), else by those functions (a grid of up to four fills half a ZMM register: the AVX2
// kernel's one YMM register per value is cheaper).
func searchGroup(x, wd []float64, bits int, grid []float64, cs *clipScratch) (s float32, err, den float64) {
	if !search512 || len(grid) <= clipLanes/2 || len(grid) > clipLanes || len(x) == 0 {
		s, err = chooseScaleErr(x, wd, bits, grid, cs)
		return s, err, sqNorm(x, wd)
	}
	var pw *float64
	if wd != nil {
		pw = &wd[:len(x)][0]
	}
	lo, hi := codeRange(bits)
	lohi := [2]float64{float64(lo), float64(hi)}
	copy(cs.grid8[:], grid) // the lanes past the grid are never chosen
	amax, den, best := kernel.GroupSearch8(&x[0], pw, len(x), &cs.grid8, len(grid), qmax(bits), &lohi, &cs.s8, &cs.errs8)
	switch {
	case amax == 0:
		return 0, 0, den
	case best >= 0:
		return float32(cs.s8[best]), cs.errs8[best], den
	case best == -1: // no factor gives a non-zero scale
		return 0, den, den
	default: // no error below +Inf
		return 0, math.Inf(1), den
	}
}

// quantizeGroup quantizes one group: it chooses its scale from grid (weighted by wd, nil:
// unweighted), writes its codes and returns the scale, the chosen candidate's error and Σ wd·x²
// (den) — chooseScaleErr, sqNorm and quantizeWith, through the kernels this CPU has.
func quantizeGroup(codes []int8, x, wd []float64, bits int, grid []float64, cs *clipScratch) (s float32, err, den float64) {
	if len(grid) == 1 && clipKernel {
		return quantGroup1(codes, x, wd, bits, grid[0])
	}
	s, err, den = searchGroup(x, wd, bits, grid, cs)
	quantizeWith(codes, x, s, bits)
	return s, err, den
}

// quantGroup1 is quantizeGroup for a grid of one factor f: after the group's amax, one pass
// (kernel.GroupQuant1, four values at a time; the same arithmetic, bit for bit) writes the codes
// and sums the error and den, instead of a search pass and a codes pass.
func quantGroup1(codes []int8, x, wd []float64, bits int, f float64) (s float32, err, den float64) {
	amax := groupAmax(x)
	if amax != 0 {
		s = float32(f * amax / qmax(bits))
	}
	if s == 0 { // an all-zero group (error 0), or a factor that gives no scale (error Σ wd·x²)
		clear(codes)
		den = sqNorm(x, wd)
		if amax == 0 {
			return 0, 0, den
		}
		return 0, den, den
	}
	lo, hi := codeRange(bits)
	flo, fhi := float64(lo), float64(hi)
	s64 := float64(s)
	inv := 1 / s64
	n := len(x) &^ 3
	if n > 0 {
		var pw *float64
		if wd != nil {
			pw = &wd[:n][0]
		}
		lohi := [2]float64{flo, fhi}
		err, den = kernel.GroupQuant1(&x[0], pw, n, s64, inv, &lohi, &codes[:n][0])
	}
	for k := n; k < len(x); k++ { // the tail, continuing the sums in order
		v := x[k]
		q := quantCode(v, inv, flo, fhi)
		codes[k] = int8(q)
		d := v - float64(q*s64)
		if wd == nil {
			err += float64(d * d)
			den += float64(v * v)
		} else {
			err += float64(float64(wd[k]*d) * d)
			den += float64(float64(wd[k]*v) * v)
		}
	}
	if !(err < math.Inf(1)) { // no error below +Inf: not chosen, scale 0 (as chooseScaleErr)
		clear(codes)
		return 0, math.Inf(1), den
	}
	return s, err, den
}

// search512 says whether searchGroup and quantCodes run the AVX-512 kernels.
var search512 = kernel.Available512

// sqNorm returns Σ wd_k·x_k·x_k (wd nil: Σ x_k·x_k), in order.
func sqNorm(x, wd []float64) float64 {
	e := 0.0
	if wd == nil {
		for _, v := range x {
			e += float64(v * v)
		}
		return e
	}
	for k, v := range x {
		e += float64(float64(wd[k]*v) * v)
	}
	return e
}

// clipKernel says whether clipErrs, groupAmax and quantCodes run the amd64 kernels.
var clipKernel = kernel.Available

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
			kernel.ClipErrs4(&x[0], pw, len(x), &s[j], &inv[j], &lohi, &errs[j])
		} else {
			kernel.ClipErrs8(&x[0], pw, len(x), &s[j], &inv[j], &lohi, &errs[j])
		}
	}
}

// groupAmax returns max |x_k|.
func groupAmax(x []float64) float64 {
	n := 0
	amax := 0.0
	if clipKernel {
		if n = len(x) &^ 3; n > 0 {
			amax = kernel.AbsMax4(&x[0], n)
		}
	}
	for _, v := range x[n:] {
		amax = max(amax, math.Abs(v))
	}
	return amax
}

// quantCodes sets codes[k] = quantCode(x[k], inv, lo, hi).
func quantCodes(codes []int8, x []float64, inv, lo, hi float64) {
	n := 0
	if search512 {
		if n = len(x) &^ 7; n > 0 {
			lohi := [2]float64{lo, hi}
			kernel.QuantCodes8(&x[0], n, inv, &lohi, &codes[:n][0])
		}
	}
	if clipKernel && len(x)-n >= 4 {
		m := (len(x) - n) &^ 3
		lohi := [2]float64{lo, hi}
		kernel.QuantCodes4(&x[n], m, inv, &lohi, &codes[n:][:m][0])
		n += m
	}
	for k, v := range x[n:] {
		codes[n+k] = int8(quantCode(v, inv, lo, hi))
	}
}

// nonFinite reports whether x holds ±Inf or NaN.
func nonFinite(x []float32) bool {
	n := 0
	if clipKernel {
		if n = len(x) &^ 7; n > 0 && kernel.NonFinite8(&x[0], n) {
			return true
		}
	}
	for _, v := range x[n:] {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			return true
		}
	}
	return false
}

// subScaled sets y[j] -= e·x[j] (the product rounded, then the difference), len(x) >= len(y).
func subScaled(y, x []float64, e float64) {
	if clipKernel && len(y) >= 4 {
		kernel.SubScaled(&y[0], &x[:len(y)][0], len(y), e)
		return
	}
	for j := range y {
		y[j] -= float64(e * x[j])
	}
}
