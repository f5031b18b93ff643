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

// NonFinite8 reports whether one of the n values at x (n a positive multiple of 8) is ±Inf or NaN.
//
//go:noescape
func NonFinite8(x *float32, n int) bool

// GroupQuant1 quantizes a group with one candidate scale s (inv = 1/s): it sets codes[k] =
// q_k = clamp(round-half-away(x_k·inv), lo, hi) for the n values at x (n a positive multiple of 4)
// and returns err = Σ_k wd_k·d·d (wd nil: d·d) with d = x_k − q_k·s, and den = Σ_k wd_k·x_k·x_k
// (wd nil: x_k·x_k; (wd·x)·x), each summed in order from k = 0 without fused multiply-adds.
//
//go:noescape
func GroupQuant1(x, wd *float64, n int, s, inv float64, lohi *[2]float64, codes *int8) (err, den float64)

// Available512 says whether the AVX-512 kernels may run (AVX-512 F and VL, with the OS saving
// the ZMM registers).
var Available512 = Available && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL

// GroupSearch8 is one group's clip search for up to eight candidates (AVX-512). It returns
// amax = max |x_k| over the n values at x and den = Σ_k wd_k·x_k·x_k (wd nil: x_k·x_k; (wd·x)·x,
// in order from k = 0). When amax is not 0 it sets, for j < 8, s_j = float64(float32(grid_j·amax/qmax))
// and errs_j as ClipErrs8 does for s_j and 1/s_j, and returns as best the candidate chosen among
// the first lanes: the first j < lanes with s_j != 0 whose errs_j is least and below +Inf; -1 if
// no such lane has s_j != 0, -2 if some do but none has an error below +Inf. When amax is 0 it
// returns den 0 and best -1 and sets nothing. n must be positive, lanes in [1, 8].
//
//go:noescape
func GroupSearch8(x, wd *float64, n int, grid *[8]float64, lanes int, qmax float64, lohi *[2]float64, s, errs *[8]float64) (amax, den float64, best int)

// QuantCodes8 is QuantCodes4 eight values at a time (AVX-512), n a positive multiple of 8.
//
//go:noescape
func QuantCodes8(x *float64, n int, inv float64, lohi *[2]float64, codes *int8)

// GroupPrep16 prepares the float32 clip search of the groups of one row (AVX-512): for the n
// values at x in groups of group values (the last one shorter when group does not divide n), it
// writes at tab[32i:] group i's candidate scales s_j = float32(grid_j·amax/qmax) (tab[32i+j],
// j < 8), their inverses 1/s_j in float32, 0 where s_j = 0 (tab[32i+8+j]), and
// amax = max |x_k| (tab[32i+16]). n and group must be positive. With lanes 1 (a grid of one
// factor) only s_0 and its inverse are computed, the same values, and the other seven of each are
// written 0; any other lanes computes all eight. The groups do not depend on one another, so the
// out-of-order core overlaps their divisions instead of waiting for each.
//
//go:noescape
func GroupPrep16(x *float32, n, group int, grid *[8]float64, lanes int, qmax float64, tab *float32)

// GroupSearch16 is one group's clip search in float32 for up to eight candidates (AVX-512,
// sixteen values of the group in the lanes of one register): ork/quant's groupSearch32Go, bit for
// bit. It takes the n values at x (n positive), their weights at wd (nil: unweighted), the first
// lanes (1 to 8) candidates, lohi = {lo, hi}, and the group's entry sc of GroupPrep16's table
// (amax, scales and inverses of the grid padded to eight factors), and writes the n codes at
// codes — except for a group whose amax is outside [2^-40, 2^40] (or NaN), for which it returns
// best = -3 and writes no code.
//
//go:noescape
func GroupSearch16(x, wd *float32, n, lanes int, lohi *[2]float32, sc *[32]float32, codes *int8) (s float32, err, den float64, best int)

// RowOne16x8 is GroupPrep16 and GroupSearch16 for a grid of one factor f (lanes 1) and no weights
// over blocks (positive) of eight whole groups of group values, group a positive multiple of 16,
// at x (AVX-512): the eight groups of a block side by side (their maxima, divisions and sums
// reduced together), the same arithmetic bit for bit. For group i it writes its codes (group
// bytes from codes[i·group]), scales[i] = s, errs[i] = err and dens[i] = den as GroupSearch16
// returns them, and sets bit i mod 8 of done[i/8]; it leaves the bit clear, and nothing defined
// for the group (its codes may be partly written), when GroupSearch16 would not take its one-pass
// path or would not choose the factor: amax 0, NaN or outside [2^-40, 2^40], s = 0, or an error
// not below +Inf. The caller redoes those groups.
//
//go:noescape
func RowOne16x8(x *float32, blocks, group int, f, qmax float64, lohi *[2]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8)

// AbsMaxBits8 returns the largest bit pattern of |x_k| over the n float32 values at x, n a positive
// multiple of 8 (AVX2): math.Float32frombits of it is max |x_k| when every value is finite; a NaN's
// pattern lies above +Inf's, so a NaN among them gives a NaN.
//
//go:noescape
func AbsMaxBits8(x *float32, n int) uint32

// PrepScales8 writes the float32 clip search's eight candidate scales of a group whose max |x_k| is
// amax (AVX2): sj[j] = float32(grid[j]·float64(amax)/qmax) and inv[j] = 1/sj[j] in float32, 0 where
// sj[j] = 0 — the IEEE operations of ork/quant's prep32, lane by lane, so the same bits.
//
//go:noescape
func PrepScales8(amax float32, grid *[8]float64, qmax float64, sj, inv *[8]float32)

// ErrSums16x2 is the float32 clip search's sums on AVX2: for chunks (positive) whole chunks of
// sixteen values at x and their weights at wd (nil: unweighted), it sets errs[j] for j < lanes
// (1 to 8) to E_j, the sum of d·d ((wd·d)·d) with d = y − clamp(round-half-away(y), lo, hi),
// y = x·inv[j], in sixteen lane sums (value k into lane k mod 16) added in groupSearch32Go's tree,
// and returns den, the sum of x·x ((wd·x)·x) the same way. consts holds the sign mask,
// 0.49999997, lo and hi, each eight times.
//
//go:noescape
func ErrSums16x2(x, wd *float32, chunks int, inv *[8]float32, lanes int, consts *[32]float32, errs *[8]float32) (den float32)

// RowOne16x8AVX2 is RowOne16x8 on AVX2: the same contract and results bit for bit, with consts (the
// sign mask, 0.49999997, lo and hi, each eight times, as for ErrSums16x2) in place of lohi. A
// block's eight maxima, scales and inverses are computed side by side, its groups' sums one group
// at a time in two registers of eight lane sums, as ErrSums16x2's.
//
//go:noescape
func RowOne16x8AVX2(x *float32, blocks, group int, f, qmax float64, consts *[32]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8)

// RowSearch16x2 is the float32 clip search of groups (positive) whole groups of group values (a
// positive multiple of 16) at x with their weights at wd (nil: unweighted) on AVX2: for each group
// AbsMaxBits8's amax,
// PrepScales8's candidates over the first lanes (1 to 8) factors of grid (none negative), ErrSums16x2's sums,
// ork/quant's choose32 and Codes16x2's codes, bit for bit. For group i it writes its codes (group
// bytes from codes[i·group]), scales[i] = s_best, errs[i] = the chosen error and dens[i] = den, and
// sets done[i] to 1; it sets done[i] to 0, and leaves the rest of the group's answers undefined, for
// a group whose amax is outside [2^-40, 2^40] (0 and NaN included) or for which no candidate may be
// chosen (choose32's best < 0). The caller redoes those groups. consts as for ErrSums16x2.
//
//go:noescape
func RowSearch16x2(x, wd *float32, groups, group int, grid *[8]float64, lanes int, qmax float64, consts *[32]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8)

// Codes16x2 writes the codes clamp(round-half-away(x·inv), lo, hi) of chunks (positive) whole
// chunks of sixteen values at x (AVX2; consts as for ErrSums16x2).
//
//go:noescape
func Codes16x2(x *float32, chunks int, inv float32, consts *[32]float32, codes *int8)

// GPTQScales8 is GPTQ's loss over one group of n values at x for eight candidate scales at once
// (AVX-512), ork/quant's chooseScaleGPTQ loop with a candidate in each lane: for lane j it sets
// errs_j = Σ_a r_a², r_a = (y_a − quantCode(y_a, inv_j)·s_j)/u[a·kp+a], where y starts as x and
// y_b −= r_a·u[a·kp+b] for b > a after each a (u: the group's block of GPTQ's factor, row stride
// kp). Every lane runs all n columns (the scalar loop stops a candidate once its loss passes the
// best; such a candidate cannot win either way). buf is scratch for 8·n values; n must be positive.
//
//go:noescape
func GPTQScales8(x *float64, n int, u *float64, kp int, s, inv *[8]float64, lohi *[2]float64, buf *float64, errs *[8]float64)

// GPTQScales8AVX2 is GPTQScales8 on AVX2 (the eight lanes in two registers of four): the same
// losses bit for bit.
//
//go:noescape
func GPTQScales8AVX2(x *float64, n int, u *float64, kp int, s, inv *[8]float64, lohi *[2]float64, buf *float64, errs *[8]float64)
