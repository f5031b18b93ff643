package quant

import (
	"math"
	"slices"

	"orkpipe/ork/quant/internal/kernel"
)

// RTN's clip search in float32. RTN reads float32 weights, and a group's candidate errors only
// rank its scales, so float64 buys nothing there: each group is searched in float32 (GPTQ's
// scale search, chooseScale, stays float64). The arithmetic is fixed so that the pure-Go
// reference here (groupSearch32Go), the AVX-512 kernels (kernel.GroupPrep16 and
// kernel.GroupSearch16, sixteen values in the lanes of one register) and the AVX2 ones
// (kernel.ErrSums16x2, kernel.Codes16x2: the sixteen lanes in two registers; kernel.RowSearch16x2
// and kernel.RowOne16x8AVX2 for a row's whole groups at once) give bit-identical results, so a pack
// does not depend on the machine that built it:
//
//   - amax = max |x_k|; s_j = float32(f_j·float64(amax)/qmax) for the grid factors f_j (as the
//     float64 search), inv_j = 1/s_j in float32 (0 where s_j = 0);
//   - y = x_k·inv_j, q = clamp(round-half-away(y), lo, hi) (roundAway32), d = y − q: the error
//     in units of the scale, so it cannot overflow whatever the weight's magnitude;
//   - E_j sums wd_k·d·d ((wd·d)·d; unweighted d·d) over the group in sixteen lane sums (value k
//     into lane k mod 16, in order), then adds the lanes in a fixed tree (reduce16); den sums
//     wd_k·x_k·x_k ((wd·x)·x) the same way; no fused multiply-adds;
//   - err_j = (s_j·s_j)·E_j in float64, and the choice is chooseScaleErr's: the first factor
//     with s_j != 0 whose err_j is least and below +Inf;
//   - codes are clamp(round-half-away(x_k·inv_best), lo, hi).
//
// The weights wd are diag(H) or the importance scaled by a power of two so that the largest is
// below 1, then rounded to float32 (weights32). A group runs in float32 only when its amax lies in
// [2^-40, 2^40] and every factor is 0 or of magnitude in [2^-20, 2^20] (then no sum can overflow or
// lose its scale to underflow); any other group, and grids of more than eight factors, take the
// float64 search (quantizeGroup) on the same weights.

const (
	lanes32      = 16
	min32Amax    = 0x1p-40
	max32Amax    = 0x1p40
	min32Factor  = 0x1p-20
	max32Factor  = 0x1p20
	half32Bits   = 0x3EFFFFFF // the float32 below 0.5
	sign32Bit    = 0x80000000
	bestOutRange = -3 // groupSearch32's answer for a group outside the float32 range
)

// The float32 search's paths, the same results bit for bit: the AVX-512 kernels
// (kernel.GroupPrep16, kernel.GroupSearch16; kernel.RowOne16x8 for a grid of one factor), the AVX2
// ones (kernel.RowSearch16x2, and kernel.RowOne16x8AVX2 for a grid of one factor, over a row's
// whole groups; kernel.ErrSums16x2 and kernel.Codes16x2 around prep32 and choose32 for the groups
// they leave) and the pure-Go reference.
const (
	path32Go = iota
	path32AVX2
	path32AVX512
)

// search32Path is the path this CPU runs.
var search32Path = func() int {
	switch {
	case kernel.Available512:
		return path32AVX512
	case kernel.Available:
		return path32AVX2
	}
	return path32Go
}()

// grid32OK says whether grid can be searched in float32: at most eight factors, each 0 or of
// magnitude in [2^-20, 2^20].
func grid32OK(grid []float64) bool {
	if len(grid) == 0 || len(grid) > clipLanes {
		return false
	}
	for _, f := range grid {
		if a := math.Abs(f); f != 0 && !(a >= min32Factor && a <= max32Factor) {
			return false
		}
	}
	return true
}

// weights32 returns diag scaled by 2^-e, e the exponent that brings its largest magnitude below 1,
// as float32 and (the same values) as float64; nil for nil.
func weights32(diag []float64) ([]float32, []float64) {
	if diag == nil {
		return nil, nil
	}
	m := 0.0
	for _, v := range diag {
		m = max(m, math.Abs(v))
	}
	e := 0
	if m != 0 {
		_, e = math.Frexp(m)
	}
	w32, w64 := make([]float32, len(diag)), make([]float64, len(diag))
	for k, v := range diag {
		w32[k] = float32(math.Ldexp(v, -e))
		w64[k] = float64(w32[k])
	}
	return w32, w64
}

// prepStride is the float32s of one group's entry in kernel.GroupPrep16's table.
const prepStride = 32

// search32 is a worker's scratch for the float32 search.
type search32 struct {
	grid8  [clipLanes]float64 // the grid, padded with zeros (never chosen)
	tab    []float32          // the row's groups prepared by kernel.GroupPrep16
	errs   []float64          // a row kernel's answers, by group (quantizeRowKernel32)
	dens   []float64
	done   []uint8 // bits per block (RowOne16x8, RowOne16x8AVX2), bytes per group (RowSearch16x2)
	lanes  int
	nonNeg bool      // no factor is negative (RowSearch16x2's condition; WithClipGrid's are positive)
	buf    []float64 // a group widened for the float64 search
	cs     *clipScratch
	avx2   avx2Scratch
	consts [4 * clipLanes]float32 // the AVX2 kernels' constants (setConsts32)
}

// avx2Scratch holds a group padded to whole chunks of sixteen for the AVX2 kernels.
type avx2Scratch struct {
	x, wd []float32
	codes []int8
}

// setConsts32 fills the AVX2 kernels' constants: the sign mask, 0.49999997, lo and hi, each eight
// times.
func setConsts32(c *[4 * clipLanes]float32, lohi *[2]float32) {
	for i := range clipLanes {
		c[i] = math.Float32frombits(sign32Bit)
		c[clipLanes+i] = math.Float32frombits(half32Bits)
		c[2*clipLanes+i] = lohi[0]
		c[3*clipLanes+i] = lohi[1]
	}
}

func newSearch32(grid []float64, kp int) *search32 {
	s := &search32{lanes: len(grid), buf: make([]float64, kp), cs: newClipScratch(len(grid))}
	copy(s.grid8[:], grid)
	s.nonNeg = !slices.ContainsFunc(grid, func(f float64) bool { return f < 0 })
	return s
}

// rowKernels32 says whether quantizeRow32 takes quantizeRowKernel32 where it can (tests compare
// both).
var rowKernels32 = true

// quantizeRow32 is quantizeRow for the float32 row x (len KP) with weights wd32 (nil: unweighted;
// wd64 the same values in float64 for the groups the float64 search takes).
func quantizeRow32(w *Weight, n int, codes []int8, x, wd32 []float32, wd64, grid []float64, s *search32) (num, den float64) {
	g := effGroup(w.KP, w.Group)
	if rowKernels32 && g%16 == 0 {
		if wd32 == nil && s.lanes == 1 && search32Path != path32Go && w.KP/g >= 8 {
			return quantizeRowKernel32(w, n, codes, x, nil, nil, grid, s, true)
		}
		if search32Path == path32AVX2 && w.KP >= g && s.nonNeg {
			return quantizeRowKernel32(w, n, codes, x, wd32, wd64, grid, s, false)
		}
	}
	ng := w.Groups()
	codes = codes[:w.KP]
	lo, hi := codeRange(w.Bits)
	lohi := [2]float32{float32(lo), float32(hi)}
	q := qmax(w.Bits)
	if search32Path == path32AVX2 {
		setConsts32(&s.consts, &lohi)
	}
	if search32Path == path32AVX512 {
		if cap(s.tab) < ng*prepStride {
			s.tab = make([]float32, ng*prepStride)
		}
		kernel.GroupPrep16(&x[0], w.KP, g, &s.grid8, s.lanes, q, &s.tab[:ng*prepStride][0])
	}
	for gi := 0; gi < ng; gi++ {
		a, b := gi*g, min((gi+1)*g, w.KP)
		var wd []float32
		if wd32 != nil {
			wd = wd32[a:b]
		}
		var sc float32
		var e, d float64
		var best int
		switch search32Path {
		case path32AVX512:
			sc, e, d, best = groupSearchPrepared(codes[a:b], x[a:b], wd, s.lanes, &lohi, (*[prepStride]float32)(s.tab[gi*prepStride:]))
		case path32AVX2:
			sc, e, d, best = groupSearch32AVX2(codes[a:b], x[a:b], wd, &s.grid8, s.lanes, q, &s.consts, &s.avx2)
		default:
			sc, e, d, best = groupSearch32Go(codes[a:b], x[a:b], wd, &s.grid8, s.lanes, q, &lohi)
		}
		if best == bestOutRange {
			xg := s.buf[:b-a]
			for k, v := range x[a:b] {
				xg[k] = float64(v)
			}
			var wg []float64
			if wd64 != nil {
				wg = wd64[a:b]
			}
			sc, e, d = quantizeGroup(codes[a:b], xg, wg, w.Bits, grid, s.cs)
		}
		w.Scales[n*ng+gi] = sc
		num += e
		den += d
	}
	return num, den
}

// quantizeRowKernel32 is quantizeRow32 for groups of a multiple of 16 values by a kernel that
// takes a row's whole groups at once: with one (a grid of one factor, no weights, on the AVX-512
// and AVX2 paths) eight groups side by side by kernel.RowOne16x8 (kernel.RowOne16x8AVX2), else
// (the AVX2 path, weighted or not) a batch of eight groups at a time by kernel.RowSearch16x2. The
// groups a kernel leaves (and those after its last whole block or group) go as quantizeRow32
// takes each group: groupSearch32, then the float64 search for a group outside the float32 range.
// Codes, scales and sums are quantizeRow32's, bit for bit.
func quantizeRowKernel32(w *Weight, n int, codes []int8, x, wd32 []float32, wd64, grid []float64, s *search32, one bool) (num, den float64) {
	g := effGroup(w.KP, w.Group)
	ng := w.Groups()
	codes = codes[:w.KP]
	lo, hi := codeRange(w.Bits)
	lohi := [2]float32{float32(lo), float32(hi)}
	q := qmax(w.Bits)
	if cap(s.errs) < ng {
		s.errs, s.dens, s.done = make([]float64, ng), make([]float64, ng), make([]uint8, ng)
	}
	errs, dens, done := s.errs[:ng], s.dens[:ng], s.done[:ng]
	scales := w.Scales[n*ng : (n+1)*ng]
	setConsts32(&s.consts, &lohi)
	whole := w.KP / g
	switch {
	case one && search32Path == path32AVX512:
		kernel.RowOne16x8(&x[0], whole/8, g, s.grid8[0], q, &lohi, &codes[0], &scales[0], &errs[0], &dens[0], &done[0])
	case one:
		kernel.RowOne16x8AVX2(&x[0], whole/8, g, s.grid8[0], q, &s.consts, &codes[0], &scales[0], &errs[0], &dens[0], &done[0])
	default:
		var pw *float32
		if wd32 != nil {
			pw = &wd32[0]
		}
		kernel.RowSearch16x2(&x[0], pw, whole, g, &s.grid8, s.lanes, q, &s.consts, &codes[0], &scales[0], &errs[0], &dens[0], &done[0])
	}
	for gi := range ng {
		var taken bool
		if one { // a bit per group, in the blocks of eight
			taken = gi < whole/8*8 && done[gi/8]>>(gi%8)&1 != 0
		} else { // a byte per group
			taken = gi < whole && done[gi] != 0
		}
		if !taken {
			a, b := gi*g, min((gi+1)*g, w.KP)
			var wd []float32
			var wg []float64
			if wd32 != nil {
				wd, wg = wd32[a:b], wd64[a:b]
			}
			sc, e, d, best := groupSearch32(codes[a:b], x[a:b], wd, &s.grid8, s.lanes, q, &lohi)
			if best == bestOutRange {
				xg := s.buf[:b-a]
				for k, v := range x[a:b] {
					xg[k] = float64(v)
				}
				sc, e, d = quantizeGroup(codes[a:b], xg, wg, w.Bits, grid, s.cs)
			}
			scales[gi], errs[gi], dens[gi] = sc, e, d
		}
		num += errs[gi]
		den += dens[gi]
	}
	return num, den
}

// groupSearch32 searches one group and writes its codes on this CPU's path (search32Path): the
// AVX-512 kernels (kernel.GroupPrep16, kernel.GroupSearch16), the AVX2 ones (groupSearch32AVX2) or
// groupSearch32Go — the same results, bit for bit. quantizeRow32 prepares a whole row's groups at
// once instead.
func groupSearch32(codes []int8, x, wd []float32, grid *[clipLanes]float64, lanes int, qmax float64, lohi *[2]float32) (s float32, err, den float64, best int) {
	switch search32Path {
	case path32AVX512:
		var sc [prepStride]float32
		kernel.GroupPrep16(&x[0], len(x), len(x), grid, lanes, qmax, &sc[0])
		return groupSearchPrepared(codes, x, wd, lanes, lohi, &sc)
	case path32AVX2:
		var c [4 * clipLanes]float32
		setConsts32(&c, lohi)
		return groupSearch32AVX2(codes, x, wd, grid, lanes, qmax, &c, &avx2Scratch{})
	}
	return groupSearch32Go(codes, x, wd, grid, lanes, qmax, lohi)
}

// groupSearch32AVX2 is groupSearch32Go with its sums and codes by the AVX2 kernels (the group
// padded with zeros to whole chunks of sixteen in p when its length is not a multiple of 16).
func groupSearch32AVX2(codes []int8, x, wd []float32, grid *[clipLanes]float64, lanes int, qmax float64, consts *[4 * clipLanes]float32, p *avx2Scratch) (s float32, err, den float64, best int) {
	amax, sj, inv := prep32AVX2(x, grid, lanes, qmax)
	if amax == 0 {
		clear(codes)
		return 0, 0, 0, -1
	}
	if !(amax >= min32Amax && amax <= max32Amax) {
		return 0, 0, 0, bestOutRange
	}
	n := len(x)
	chunks := (n + lanes32 - 1) / lanes32
	px, pw := x, wd
	if n%lanes32 != 0 {
		m := chunks * lanes32
		if cap(p.x) < m {
			p.x, p.wd, p.codes = make([]float32, m), make([]float32, m), make([]int8, m)
		}
		px = p.x[:m]
		clear(px[copy(px, x):])
		if wd != nil {
			pw = p.wd[:m]
			clear(pw[copy(pw, wd):])
		}
	}
	var pwp *float32
	if pw != nil {
		pwp = &pw[0]
	}
	var e [clipLanes]float32
	den = float64(kernel.ErrSums16x2(&px[0], pwp, chunks, &inv, lanes, consts, &e))
	best, bestErr := choose32(&sj, &e, lanes)
	if best < 0 {
		return noChoice32(codes, best, den)
	}
	if n%lanes32 == 0 {
		kernel.Codes16x2(&x[0], chunks, inv[best], consts, &codes[0])
	} else {
		kernel.Codes16x2(&px[0], chunks, inv[best], consts, &p.codes[0])
		copy(codes, p.codes[:n])
	}
	return sj[best], bestErr, den, best
}

// groupSearchPrepared is kernel.GroupSearch16 of a group GroupPrep16 prepared into sc.
func groupSearchPrepared(codes []int8, x, wd []float32, lanes int, lohi *[2]float32, sc *[prepStride]float32) (s float32, err, den float64, best int) {
	var pw *float32
	if wd != nil {
		pw = &wd[:len(x)][0]
	}
	return kernel.GroupSearch16(&x[0], pw, len(x), lanes, lohi, sc, &codes[:len(x)][0])
}

// roundAway32 is round half away from zero for float32: trunc(y + copysign(0.49999997, y)) (the
// sum rounds to nearest even exactly where a tie must go away from zero).
func roundAway32(y float32) float32 {
	h := math.Float32frombits(half32Bits | math.Float32bits(y)&sign32Bit)
	return float32(math.Trunc(float64(y + h)))
}

// quantCode32 is clamp(roundAway32(v·inv), lo, hi).
func quantCode32(v, inv, lo, hi float32) float32 {
	q := roundAway32(v * inv)
	if q > hi {
		return hi
	}
	if q < lo {
		return lo
	}
	return q
}

// reduce16 adds sixteen lane sums in the kernel's tree: a[l]+a[l+8], then +4, +2, +1 apart.
func reduce16(a *[lanes32]float32) float32 {
	var t [8]float32
	for l := range t {
		t[l] = a[l] + a[l+8]
	}
	u0, u1, u2, u3 := t[0]+t[4], t[1]+t[5], t[2]+t[6], t[3]+t[7]
	return (u0 + u2) + (u1 + u3)
}

// groupSearch32Go is the reference of the float32 group search (see the top of this file) over
// the first lanes factors of grid: it returns the chosen scale, its error err_j, den and the
// chosen factor's index, and writes the codes. An all-zero group gives (0, 0, 0, -1); no factor
// with a non-zero scale (0, den, den, -1); none with an error below +Inf (0, +Inf, den, -2) — the
// codes all zero in these three cases. A group outside the float32 range (amax not in
// [2^-40, 2^40]) gives best = bestOutRange and writes nothing.
func groupSearch32Go(codes []int8, x, wd []float32, grid *[clipLanes]float64, lanes int, qmax float64, lohi *[2]float32) (s float32, err, den float64, best int) {
	amax, sj, inv := prep32(x, grid, lanes, qmax)
	if amax == 0 {
		clear(codes)
		return 0, 0, 0, -1
	}
	if !(amax >= min32Amax && amax <= max32Amax) {
		return 0, 0, 0, bestOutRange
	}
	lo, hi := lohi[0], lohi[1]
	var acc [clipLanes][lanes32]float32
	var dacc [lanes32]float32
	for k, v := range x {
		l := k % lanes32
		if wd == nil {
			dacc[l] += float32(v * v)
		} else {
			dacc[l] += float32(float32(wd[k]*v) * v)
		}
		for j := range lanes {
			y := v * inv[j]
			d := y - quantCode32(v, inv[j], lo, hi)
			if wd == nil {
				acc[j][l] += float32(d * d)
			} else {
				acc[j][l] += float32(float32(wd[k]*d) * d)
			}
		}
	}
	den = float64(reduce16(&dacc))
	var e [clipLanes]float32
	for j := range lanes {
		e[j] = reduce16(&acc[j])
	}
	best, bestErr := choose32(&sj, &e, lanes)
	if best < 0 {
		return noChoice32(codes, best, den)
	}
	for k, v := range x {
		codes[k] = int8(quantCode32(v, inv[best], lo, hi))
	}
	return sj[best], bestErr, den, best
}

// noChoice32 is a search's answer when choose32 chose nothing (best -1 or -2): codes all zero,
// scale 0, err den (no non-zero scale) or +Inf (no error below +Inf).
func noChoice32(codes []int8, best int, den float64) (s float32, err, d float64, b int) {
	clear(codes)
	if best == -1 {
		return 0, den, den, -1
	}
	return 0, math.Inf(1), den, -2
}

// prep32 is the start of a group's search: amax = max |x_k| (NaN if any x_k is), the first lanes
// candidates' scales s_j = float32(grid_j·float64(amax)/qmax) and their inverses 1/s_j in float32 (0
// where s_j = 0).
func prep32(x []float32, grid *[clipLanes]float64, lanes int, qmax float64) (amax float32, sj, inv [clipLanes]float32) {
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	for j := range lanes {
		sj[j] = float32(grid[j] * float64(amax) / qmax)
		if sj[j] != 0 {
			inv[j] = 1 / sj[j]
		}
	}
	return amax, sj, inv
}

// choose32 is the choice among the first lanes candidates with sums e: the first j with
// s_j != 0 whose (s_j·s_j)·e_j (float64) is least and below +Inf, and that error; best -1 when no
// s_j is non-zero, -2 when none has an error below +Inf.
func choose32(sj, e *[clipLanes]float32, lanes int) (best int, bestErr float64) {
	best, bestErr = -1, math.Inf(1)
	nonzero := false
	for j := range lanes {
		if sj[j] == 0 {
			continue
		}
		nonzero = true
		s64 := float64(sj[j])
		if v := float64(s64*s64) * float64(e[j]); v < bestErr {
			best, bestErr = j, v
		}
	}
	if nonzero && best < 0 {
		return -2, bestErr
	}
	return best, bestErr
}

// prep32AVX2 is prep32 in the AVX2 kernels (the same bits): amax eight values at a time, the eight
// candidates' scales and inverses in two vectors of divisions; those past lanes are cleared, as
// prep32 leaves them.
func prep32AVX2(x []float32, grid *[clipLanes]float64, lanes int, qmax float64) (amax float32, sj, inv [clipLanes]float32) {
	amax = absMax32(x)
	kernel.PrepScales8(amax, grid, qmax, &sj, &inv)
	clear(sj[lanes:])
	clear(inv[lanes:])
	return amax, sj, inv
}

// absMax32 returns max |x_k|, NaN if any x_k is NaN, 0 for no values. It takes the largest bit pattern
// of |x_k| (the sign bit cleared): for non-negative floats the patterns order as the values do, and a
// NaN's lie above +Inf's. Eight values at a time in an AVX2 kernel where there is one.
func absMax32(x []float32) float32 {
	var m uint32
	n := 0
	if kernel.Available && len(x) >= 8 {
		n = len(x) &^ 7
		m = kernel.AbsMaxBits8(&x[0], n)
	}
	for _, v := range x[n:] {
		m = max(m, math.Float32bits(v)&^(1<<31))
	}
	return math.Float32frombits(m)
}
