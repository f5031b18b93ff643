package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// chooseScaleRef is the clip search as first written (one candidate at a time, math.Round): the
// oracle the kernel and its Go twin must match bit for bit.
func chooseScaleRef(x, wd []float64, bits int, grid []float64) float32 {
	amax := 0.0
	for _, v := range x {
		amax = max(amax, math.Abs(v))
	}
	if amax == 0 {
		return 0
	}
	lo, hi := codeRange(bits)
	best, bestErr := float32(0), math.Inf(1)
	for _, f := range grid {
		s := float32(f * amax / qmax(bits))
		if s == 0 {
			continue
		}
		s64 := float64(s)
		inv := 1 / s64
		e := 0.0
		for k, v := range x {
			q := math.Max(math.Min(math.Round(v*inv), float64(hi)), float64(lo))
			d := v - float64(q*s64)
			if wd == nil {
				e += float64(d * d)
			} else {
				e += float64(float64(wd[k]*d) * d)
			}
		}
		if e < bestErr {
			best, bestErr = s, e
		}
	}
	return best
}

// clipCase draws a group: heavy-tailed values, exact code boundaries (±k.5·s), zeros, -0,
// denormals and huge magnitudes.
func clipCase(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	scale := math.Pow(10, float64(rng.IntN(16)-8))
	for i := range x {
		switch rng.IntN(10) {
		case 0:
			x[i] = 0
		case 1:
			x[i] = math.Copysign(0, -1)
		case 2:
			x[i] = float64(float32(float64(rng.IntN(15)-7)+0.5) * float32(scale))
		case 3:
			x[i] = float64(float32(rng.NormFloat64() * scale * 1e-30))
		default:
			x[i] = float64(float32(rng.NormFloat64() * rng.ExpFloat64() * scale))
		}
	}
	if rng.IntN(20) == 0 {
		x[rng.IntN(n)] = float64(float32(3e38))
	}
	return x
}

func TestClipSearchMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 17))
	grids := [][]float64{DefaultClipGrid, {1}, {1, 0.9, 0.8}, {1, 0.875, -1, -0.875}, {1, 0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.91, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55}}
	for i := 0; i < 20000; i++ {
		n := []int{32, 12, 1, 64, 128, 33}[i%6]
		x := clipCase(rng, n)
		var wd []float64
		if i%3 == 0 {
			wd = make([]float64, n)
			for k := range wd {
				wd[k] = rng.ExpFloat64() * math.Pow(10, float64(rng.IntN(6)-3))
			}
		}
		bits := []int{4, 8}[i%2]
		grid := grids[i%len(grids)]
		want := chooseScaleRef(x, wd, bits, grid)
		if got := chooseScale(x, wd, bits, grid); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("case %d (n %d, bits %d, grid %v, weighted %v): scale %v, reference %v; x = %v", i, n, bits, grid, wd != nil, got, want, x)
		}
	}
}

func TestClipErrsKernelMatchesGo(t *testing.T) {
	if !clipKernel {
		t.Skip("no clip kernel on this CPU: clipErrs is clipErrsGo")
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for i := 0; i < 5000; i++ {
		n := 1 + rng.IntN(70)
		x := clipCase(rng, n)
		var wd []float64
		if i%2 == 1 {
			wd = make([]float64, n)
			for k := range wd {
				wd[k] = rng.ExpFloat64()
			}
		}
		cs := newClipScratch(16)
		amax := groupAmax(x)
		for j := range cs.s {
			f := 1 - float64(j)/40
			if j%2 == 1 { // negative scales (WithNegativeScales)
				f = -f
			}
			if s := float32(f * amax / 7); s != 0 && j != 13 {
				cs.s[j], cs.inv[j] = float64(s), 1/float64(s)
			}
		}
		// Candidate 3: a power-of-two scale, and values on its exact rounding boundaries (k+0.5)·s.
		p2 := math.Ldexp(1, rng.IntN(40)-20)
		cs.s[3], cs.inv[3] = p2, 1/p2
		for k := 0; k < n; k += 2 {
			x[k] = (float64(rng.IntN(21)-10) + 0.5) * p2
		}
		grid := 1 + rng.IntN(len(cs.s))
		want := make([]float64, grid)
		clipErrsGo(x, wd, cs.s[:grid], cs.inv[:grid], want, -8, 7)
		clipErrs(x, wd, cs.s, cs.inv, cs.errs, grid, -8, 7)
		for j := range want {
			if math.Float64bits(cs.errs[j]) != math.Float64bits(want[j]) {
				t.Fatalf("case %d candidate %d: kernel %v, Go %v (x %v)", i, j, cs.errs[j], want[j], x)
			}
		}
	}
}

func TestRoundAwayIsMathRound(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 0.5, -0.5, 1.5, -1.5, 2.5, 0.49999999999999994, -0.49999999999999994,
		4503599627370495.5, 4503599627370496, 1e300, -1e300, math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64, 7.499999999999999, 7.5}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		vals = append(vals, rng.NormFloat64()*math.Pow(2, float64(rng.IntN(120)-60)), float64(rng.IntN(40)-20)/2)
	}
	for _, v := range vals {
		if got, want := roundAway(v), math.Round(v); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("roundAway(%v) = %v, math.Round = %v", v, got, want)
		}
	}
	if !math.IsNaN(roundAway(math.NaN())) {
		t.Fatal("roundAway(NaN) is not NaN")
	}
}

func TestQuantCodesAndAmaxMatchScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	for i := 0; i < 5000; i++ {
		n := 1 + rng.IntN(80)
		x := clipCase(rng, n)
		amax := 0.0
		for _, v := range x {
			if math.Abs(v) > amax {
				amax = math.Abs(v)
			}
		}
		if got := groupAmax(x); got != amax {
			t.Fatalf("case %d: groupAmax %v, want %v (x %v)", i, got, amax, x)
		}
		inv := 1 / float64(float32(amax*(1-rng.Float64()/4)/7))
		if rng.IntN(4) == 0 { // exact rounding boundaries
			p2 := math.Ldexp(1, rng.IntN(40)-20)
			inv = 1 / p2
			for k := range x {
				x[k] = (float64(rng.IntN(21)-10) + 0.5) * p2
			}
		}
		lo, hi := -8.0, 7.0
		if i%2 == 1 {
			lo, hi = -127, 127
		}
		got := make([]int8, n)
		quantCodes(got, x, inv, lo, hi)
		for k, v := range x {
			if want := int8(math.Max(math.Min(math.Round(v*inv), hi), lo)); got[k] != want {
				t.Fatalf("case %d: code %d of %v = %d, want %d", i, k, v, got[k], want)
			}
		}
	}
}

func TestSubScaledMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	for i := 0; i < 3000; i++ {
		n := rng.IntN(140)
		x, y := clipCase(rng, n+1), clipCase(rng, n+1)
		e := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(10)-5))
		want := append([]float64(nil), y...)
		for j := 0; j < n; j++ {
			want[j] -= float64(e * x[j])
		}
		subScaled(y[:n], x, e)
		for j := range want {
			if math.Float64bits(y[j]) != math.Float64bits(want[j]) {
				t.Fatalf("case %d (n %d): y[%d] = %v, want %v", i, n, j, y[j], want[j])
			}
		}
	}
}
