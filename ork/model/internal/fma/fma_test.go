package fma

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// exact is a·b + c rounded once to float32 by math/big (the product and sum exact at 300 bits).
func exact(a, b, c float32) float32 {
	if a != a || b != b || c != c {
		return float32(math.NaN())
	}
	pa, pb, pc := new(big.Float).SetPrec(300), new(big.Float).SetPrec(300), new(big.Float).SetPrec(300)
	if math.IsInf(float64(a), 0) || math.IsInf(float64(b), 0) || math.IsInf(float64(c), 0) {
		return float32(math.FMA(float64(a), float64(b), float64(c))) // infinities: no rounding to get wrong
	}
	pa.SetFloat64(float64(a))
	pb.SetFloat64(float64(b))
	pc.SetFloat64(float64(c))
	sum := new(big.Float).SetPrec(300).Add(new(big.Float).SetPrec(300).Mul(pa, pb), pc)
	if sum.Sign() == 0 {
		return float32(math.FMA(float64(a), float64(b), float64(c))) // an exact zero's sign: IEEE's rule
	}
	f, _ := sum.Float32()
	return f
}

// TestF32MatchesExact checks F32 against math/big bit for bit: random values of every magnitude, sums
// that land on a float32 midpoint in float64 while the exact sum lies just off it (where rounding a
// float64 FMA to float32 is wrong), in the normal and subnormal ranges and at the overflow boundary.
func TestF32MatchesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(a, b, c float32) {
		t.Helper()
		got, want := F32(a, b, c), exact(a, b, c)
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("F32(%v, %v, %v) = %v (%#x), exact %v (%#x)", a, b, c, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	rnd := func() float32 {
		return float32(r.NormFloat64() * math.Exp2(float64(r.IntN(80)-40)))
	}
	for range 200000 {
		check(rnd(), rnd(), rnd())
	}
	wrong := 0
	for i := range 200000 {
		// c, the midpoint m = c + ulp(c)/2 (sign s) and a·b = ulp(c)/2·(1 ± 2^-46): the exact sum is
		// m ± a sliver far below float64's precision, so p + c rounds to m in float64.
		c := float32(1+r.Float64()) * float32(math.Exp2(float64(r.IntN(250)-125)))
		if i%7 == 0 {
			c = math.Float32frombits(uint32(1 + r.IntN(1<<23))) // subnormal
		}
		if i%11 == 0 {
			c = math.Nextafter32(math.MaxFloat32, 0) // next to the overflow boundary
			if i%22 == 0 {
				c = math.MaxFloat32
			}
		}
		s := float32(1 - 2*r.IntN(2))
		c *= s
		ulp := math.Nextafter32(float32(math.Abs(float64(c))), float32(math.Inf(1))) - float32(math.Abs(float64(c)))
		if math.IsInf(float64(ulp), 0) {
			ulp = math.Nextafter32(math.MaxFloat32, 0) - math.Nextafter32(math.Nextafter32(math.MaxFloat32, 0), 0) // 2^104
		}
		a := ulp / 2 * s
		if a == 0 { // ulp/2 below the smallest subnormal: half of it cannot be a float32
			continue
		}
		a *= float32(1 + math.Exp2(-23)) // exact unless a is subnormal
		b := float32(1 - math.Exp2(-23))
		if r.IntN(2) == 0 {
			b = float32(1 + math.Exp2(-23))
			a = ulp / 2 * s * float32(1-math.Exp2(-24))
		}
		check(a, b, c)
		if float32(math.FMA(float64(a), float64(b), float64(c))) != exact(a, b, c) {
			wrong++
		}
	}
	if wrong == 0 {
		t.Fatal("no crafted case is one that rounding a float64 FMA to float32 gets wrong: the test exercises nothing")
	}
	t.Logf("%d crafted cases where a float64 FMA rounded to float32 is wrong", wrong)
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, v := range [][3]float32{{0, 0, 0}, {float32(math.Copysign(0, -1)), 1, 0}, {1, -1, 1}, {inf, 0, 1}, {inf, 1, -inf},
		{nan, 1, 1}, {1, 1, nan}, {math.MaxFloat32, 2, -math.MaxFloat32}, {math.MaxFloat32, 1, math.MaxFloat32}} {
		check(v[0], v[1], v[2])
	}
}
