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
