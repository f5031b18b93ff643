package softmax

import (
	"math"

	"golang.org/x/sys/cpu"
)

// available says whether a kernel may run: AVX2 (expShift8) or AVX-512 F (expShift16, when
// available512 too). Variables so that tests can run every path.
var (
	available    = cpu.X86.HasAVX2 || cpu.X86.HasAVX512F
	available512 = cpu.X86.HasAVX512F
)

// expShift replaces each of the n values x at x by Expf(x - mx) in the widest kernel the CPU has.
func expShift(x *float32, n int, mx float32) {
	if available512 {
		expShift16(x, n, mx, &consts)
		return
	}
	expShift8(x, n, mx, &consts8)
}

// expShift16 replaces each of the n values x at x by Expf(x - mx), sixteen at a time (the last ones
// masked); c holds the constants (consts). AVX-512 F.
//
//go:noescape
func expShift16(x *float32, n int, mx float32, c *[12]float32)

// expShift8 is expShift16 eight at a time in YMM registers, the same operations on each lane; c
// holds the constants eight times each (consts8). AVX2.
//
//go:noescape
func expShift8(x *float32, n int, mx float32, c *[13][8]float32)

// consts8 is consts with each value broadcast to eight lanes, and the integer 127 (the exponent's
// bias) last: operands of expShift8's YMM instructions, which cannot broadcast from memory.
var consts8 = func() (c [13][8]float32) {
	for i, v := range consts {
		for j := range c[i] {
			c[i][j] = v
		}
	}
	for j := range c[12] {
		c[12][j] = math.Float32frombits(127)
	}
	return c
}()

// max8 returns the maximum of the n values at x (n at least 8) and true, or false if any is NaN; when
// the maximum is a zero its sign is either. AVX.
//
//go:noescape
func max8(x *float32, n int) (mx float32, ok bool)
