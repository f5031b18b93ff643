package fma

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/internal/testfiles"
)

// withKernels runs f with the kernels on and then off (available, available16), restoring them after.
func withKernels(t *testing.T, f func(kernel bool)) {
	t.Helper()
	on, on16 := available, available16
	defer func() { available, available16 = on, on16 }()
	available, available16 = false, false
	f(false)
	available, available16 = on, on16
	f(true)
}

// values returns n float32 values of every magnitude, with zeros, infinities and NaNs if specials.
func values(r *rand.Rand, n int, specials bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
		if specials && r.IntN(17) == 0 {
			x[i] = []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 7e4, -65520, 3e-8}[r.IntN(8)]
		}
	}
	return x
}

// TestAxpyRowsKernel checks axpyRows against AxpyRows's Go loop bit for bit: widths 1 to 200 (whole
// 64s, eights and a Go tail), strides wider than the row, 1 to 70 rows, values of every magnitude,
// rows whose products land a float32 midpoint's sliver off it, and specials (NaN-ness only).
func TestAxpyRowsKernel(t *testing.T) {
	if !available {
		testfiles.SkipCPU(t, "no AVX2 and FMA: AxpyRows runs in Go")
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, w := range []int{1, 7, 8, 9, 16, 56, 63, 64, 65, 72, 127, 128, 136, 200} {
		for _, n := range []int{1, 2, 5, 64, 70} {
			for _, mode := range []string{"random", "midpoints", "specials"} {
				stride := w + r.IntN(3)*8 + r.IntN(2)
				v, p := values(r, (n-1)*stride+w, mode == "specials"), values(r, n, mode == "specials")
				acc0 := values(r, w, false)
				if mode == "midpoints" { // the first row: acc = 1 + ulp, v·p = ulp/2·(1 - 2^-46)
					p[0] = float32(1 - math.Exp2(-23))
					for j := range acc0 {
						acc0[j], v[j] = float32(1+math.Exp2(-23)), float32(math.Exp2(-24)*(1+math.Exp2(-23)))
					}
				}
				var out [2][]float32
				withKernels(t, func(kernel bool) {
					acc := append([]float32(nil), acc0...)
					AxpyRows(acc, v, stride, p)
					out[b2i(kernel)] = acc
				})
				same(t, fmt.Sprintf("AxpyRows w %d n %d stride %d %s", w, n, stride, mode), out[1], out[0])
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestAxpyRowsPanics: a stride narrower than acc, or a v too short for the last row, is refused.
func TestAxpyRowsPanics(t *testing.T) {
	for _, c := range []struct{ w, stride, n, nv int }{{8, 7, 2, 100}, {8, 8, 3, 23}, {16, 20, 2, 35}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AxpyRows of %d columns, stride %d, %d rows, %d values: no panic", c.w, c.stride, c.n, c.nv)
				}
			}()
			AxpyRows(make([]float32, c.w), make([]float32, c.nv), c.stride, make([]float32, c.n))
		}()
	}
}

// TestRound16Kernel checks round16 against half (gguf's conversions) bit for bit over every float32
// exponent and sign, each with the top ten mantissa bits whole and the thirteen that binary16 drops
// at and around their midpoint, and over binary16's subnormal range at random.
func TestRound16Kernel(t *testing.T) {
	if !available16 {
		testfiles.SkipCPU(t, "no AVX2, FMA and F16C: Round16 runs in Go")
	}
	var x []float32
	for hi := uint32(0); hi < 1<<19; hi++ {
		for _, lo := range []uint32{0, 1, 0xfff, 0x1000, 0x1001, 0x1fff} {
			x = append(x, math.Float32frombits(hi<<13|lo))
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 1 << 20 { // exponents 101 to 113: binary16's subnormals and the values that round to them or to 0
		x = append(x, math.Float32frombits(uint32(r.IntN(2))<<31|uint32(101+r.IntN(13))<<23|uint32(r.IntN(1<<23))))
	}
	checkRound16(t, x)
}

// TestRound16Exhaustive is TestRound16Kernel over every float32 bit pattern (a minute or more).
func TestRound16Exhaustive(t *testing.T) {
	testfiles.Long(t, "every float32 bit pattern, about a minute")
	if !available16 {
		testfiles.SkipCPU(t, "no AVX2, FMA and F16C: Round16 runs in Go")
	}
	x := make([]float32, 1<<20)
	for hi := uint64(0); hi < 1<<32; hi += 1 << 20 {
		for i := range x {
			x[i] = math.Float32frombits(uint32(hi) + uint32(i))
		}
		checkRound16(t, x)
	}
}

func checkRound16(t *testing.T, x []float32) {
	t.Helper()
	got := append([]float32(nil), x...)
	round16(&got[0], len(got)&^7)
	for i, v := range x[:len(x)&^7] {
		if want := half(v); math.Float32bits(got[i]) != math.Float32bits(want) && !(want != want && got[i] != got[i]) {
			t.Fatalf("round16(%#x = %v) = %#x, half %#x", math.Float32bits(v), v, math.Float32bits(got[i]), math.Float32bits(want))
		}
	}
}

// TestRound16Ops checks AxpyRound16, ScaleRound16 and Scale (and Round16's tails) with the kernels against
// their Go loops bit for bit: lengths 1 to 70, values of every magnitude with specials, and
// accumulators in binary16 as ggml keeps them.
func TestRound16Ops(t *testing.T) {
	if !available16 {
		testfiles.SkipCPU(t, "no AVX2, FMA and F16C: the binary16 roundings run in Go")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for n := 1; n <= 70; n++ {
		for _, specials := range []bool{false, true} {
			acc0, v := values(r, n, specials), values(r, n+3, specials)
			for i := range acc0 {
				acc0[i] = half(acc0[i])
			}
			p := float32(r.NormFloat64() * math.Exp2(float64(r.IntN(20)-10)))
			var axpy, scale, round, plain [2][]float32
			withKernels(t, func(kernel bool) {
				a := append([]float32(nil), acc0...)
				AxpyRound16(a, v, p)
				axpy[b2i(kernel)] = a
				s := append([]float32(nil), acc0...)
				ScaleRound16(s, p)
				scale[b2i(kernel)] = s
				x := append([]float32(nil), v...)
				Round16(x)
				round[b2i(kernel)] = x
				x = append([]float32(nil), v...)
				Scale(x, p)
				plain[b2i(kernel)] = x
			})
			what := fmt.Sprintf("n %d specials %v p %v", n, specials, p)
			same(t, "AxpyRound16 "+what, axpy[1], axpy[0])
			same(t, "ScaleRound16 "+what, scale[1], scale[0])
			same(t, "Round16 "+what, round[1], round[0])
			same(t, "Scale "+what, plain[1], plain[0])
		}
	}
}

// TestAxpyRound16Fuses pins AxpyRound16's single rounding before the binary16 one: for these
// accumulators, values and factors the product rounded to float32 first (a multiply, then an add)
// lands on another binary16 value than the fused sum, so a kernel that does not fuse fails.
func TestAxpyRound16Fuses(t *testing.T) {
	for _, c := range []struct{ acc, v, p, fused, unfused float32 }{
		{-1, 0x1.aab8p-1, 0x1.4cb0p+0, 0.08306884765625, 0.0831298828125},
		{-2, 0x1.cc68p-1, 0x1.2db4p+1, 0.11956787109375, 0.1195068359375},
		{1, 0x1.fc68p-1, 0x1.0b20p+0, 2.037109375, 2.03515625},
		{-0.5, 0x1.0790p+0, 0x1.6370p+0, 0.92919921875, 0.9296875},
	} {
		if unfused := half(float32(c.v*c.p) + c.acc); unfused != c.unfused { // the product rounded: no fused multiply-add (arm64)
			t.Fatalf("%+v: the unfused sum rounds to %v here: not a distinguishing case", c, unfused)
		}
		withKernels(t, func(kernel bool) {
			acc, v := make([]float32, 19), make([]float32, 19)
			for i := range acc {
				acc[i], v[i] = c.acc, c.v
			}
			AxpyRound16(acc, v, c.p)
			for i, a := range acc {
				if a != c.fused {
					t.Errorf("kernel %v: %+v: acc[%d] = %v, want %v", kernel, c, i, a, c.fused)
				}
			}
		})
	}
}

// BenchmarkAxpyRows is flash attention's two products for one query row of a 256-wide head against a
// tile of 64 keys: the scores (64 columns, 256 rows) and the V accumulation (256 columns, 64 rows).
func BenchmarkAxpyRows(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	kt, q, p, v := values(r, 256*64, false), values(r, 256, false), values(r, 64, false), values(r, 64*1024, false)
	scores, acc := make([]float32, 64), make([]float32, 256)
	benchKernels(b, "attention", func() {
		AxpyRows(scores, kt, 64, q)
		AxpyRows(acc, v, 1024, p)
	})
}
