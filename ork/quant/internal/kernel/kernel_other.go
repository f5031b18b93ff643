//go:build !amd64

package kernel

// Available is false: ork/quant runs its pure-Go loops, and these are never called.
const Available = false

func ClipErrs8(x, wd *float64, n int, s, inv *float64, lohi *[2]float64, errs *float64) {
	panic("kernel: no ClipErrs8 on this architecture")
}

func ClipErrs4(x, wd *float64, n int, s, inv *float64, lohi *[2]float64, errs *float64) {
	panic("kernel: no ClipErrs4 on this architecture")
}

func AbsMax4(x *float64, n int) float64 { panic("kernel: no AbsMax4 on this architecture") }

func QuantCodes4(x *float64, n int, inv float64, lohi *[2]float64, codes *int8) {
	panic("kernel: no QuantCodes4 on this architecture")
}

func SubScaled(y, x *float64, n int, e float64) { panic("kernel: no SubScaled on this architecture") }

func NonFinite8(x *float32, n int) bool { panic("kernel: no NonFinite8 on this architecture") }

func GroupQuant1(x, wd *float64, n int, s, inv float64, lohi *[2]float64, codes *int8) (err, den float64) {
	panic("kernel: no GroupQuant1 on this architecture")
}

// Available512 is false: the AVX-512 kernels are never called.
const Available512 = false

func GroupSearch8(x, wd *float64, n int, grid *[8]float64, lanes int, qmax float64, lohi *[2]float64, s, errs *[8]float64) (amax, den float64, best int) {
	panic("kernel: no GroupSearch8 on this architecture")
}

func QuantCodes8(x *float64, n int, inv float64, lohi *[2]float64, codes *int8) {
	panic("kernel: no QuantCodes8 on this architecture")
}

func GroupPrep16(x *float32, n, group int, grid *[8]float64, lanes int, qmax float64, tab *float32) {
	panic("kernel: no GroupPrep16 on this architecture")
}

func GroupSearch16(x, wd *float32, n, lanes int, lohi *[2]float32, sc *[32]float32, codes *int8) (s float32, err, den float64, best int) {
	panic("kernel: no GroupSearch16 on this architecture")
}

func RowOne16x8(x *float32, blocks, group int, f, qmax float64, lohi *[2]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8) {
	panic("kernel: no RowOne16x8 on this architecture")
}

func RowOne16x8AVX2(x *float32, blocks, group int, f, qmax float64, consts *[32]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8) {
	panic("kernel: no RowOne16x8AVX2 on this architecture")
}

func RowSearch16x2(x, wd *float32, groups, group int, grid *[8]float64, lanes int, qmax float64, consts *[32]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8) {
	panic("kernel: no RowSearch16x2 on this architecture")
}

func GPTQScales8AVX2(x *float64, n int, u *float64, kp int, s, inv *[8]float64, lohi *[2]float64, buf *float64, errs *[8]float64) {
	panic("kernel: no GPTQScales8AVX2 on this architecture")
}

func AbsMaxBits8(x *float32, n int) uint32 { panic("kernel: no AbsMaxBits8 on this architecture") }

func PrepScales8(amax float32, grid *[8]float64, qmax float64, sj, inv *[8]float32) {
	panic("kernel: no PrepScales8 on this architecture")
}

func ErrSums16x2(x, wd *float32, chunks int, inv *[8]float32, lanes int, consts *[32]float32, errs *[8]float32) (den float32) {
	panic("kernel: no ErrSums16x2 on this architecture")
}

func Codes16x2(x *float32, chunks int, inv float32, consts *[32]float32, codes *int8) {
	panic("kernel: no Codes16x2 on this architecture")
}

func GPTQScales8(x *float64, n int, u *float64, kp int, s, inv *[8]float64, lohi *[2]float64, buf *float64, errs *[8]float64) {
	panic("kernel: no GPTQScales8 on this architecture")
}

// AvailableFMA is false: the Gram and product tiles are never called.
const AvailableFMA = false

func GramTile16(h *float64, hs, gi, gw int, ci, cj *float64, cs int, out *float64) {
	panic("kernel: no GramTile16 on this architecture")
}

func GramTile8(h *float64, hs, gi, gw int, ci, cj *float64, cs int, out *float64) {
	panic("kernel: no GramTile8 on this architecture")
}

func MulTile16(h *float64, hs, gi, gw int, ci, y *float64, cs int) {
	panic("kernel: no MulTile16 on this architecture")
}

func MulTile8(h *float64, hs, gi, gw int, ci, y *float64, cs int) {
	panic("kernel: no MulTile8 on this architecture")
}
