package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/quant/internal/kernel"
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
		if got := chooseScale(x, wd, bits, grid, newClipScratch(len(grid))); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("case %d (n %d, bits %d, grid %v, weighted %v): scale %v, reference %v; x = %v", i, n, bits, grid, wd != nil, got, want, x)
		}
	}
}

func TestClipErrsKernelMatchesGo(t *testing.T) {
	if !clipKernel {
		testfiles.SkipCPU(t, "no clip kernel on this CPU: clipErrs is clipErrsGo")
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

// withKernels runs f with the AVX2 kernels (clipKernel) and the AVX-512 ones (search512) on or
// off (each only where the CPU has it), then restores them. Tests that call it do not run in
// parallel.
func withKernels(avx2, avx512 bool, f func()) {
	old2, old512 := clipKernel, search512
	defer func() { clipKernel, search512 = old2, old512 }()
	clipKernel, search512 = avx2 && kernel.Available, avx512 && kernel.Available512
	f()
}

// groupResult is one group's search through searchGroup and its codes.
type groupResult struct {
	s        float32
	err, den float64
	codes    []int8
}

func searchAndCode(x, wd []float64, bits int, grid []float64) groupResult {
	r := groupResult{codes: make([]int8, len(x))}
	cs := newClipScratch(len(grid))
	for j := range cs.grid8 {
		cs.grid8[j] = 0.95 // a scratch used before with a longer grid: its lanes must not count
	}
	for k := range r.codes {
		r.codes[k] = 99 // every code must be written
	}
	r.s, r.err, r.den = quantizeGroup(r.codes, x, wd, bits, grid, cs)
	return r
}

// checkGroupSearch fails t unless the AVX-512 path, the AVX2 path and the pure-Go path (with
// chooseScaleRef as the oracle of the scale) give bit for bit the same scale, error, Σ wd·x² and
// codes for the group x.
func checkGroupSearch(t *testing.T, name string, x, wd []float64, bits int, grid []float64) {
	t.Helper()
	var r512, r2, rGo groupResult
	withKernels(true, true, func() { r512 = searchAndCode(x, wd, bits, grid) })
	withKernels(true, false, func() { r2 = searchAndCode(x, wd, bits, grid) })
	withKernels(false, false, func() { rGo = searchAndCode(x, wd, bits, grid) })
	same := func(a, b groupResult) bool {
		return math.Float32bits(a.s) == math.Float32bits(b.s) && math.Float64bits(a.err) == math.Float64bits(b.err) &&
			math.Float64bits(a.den) == math.Float64bits(b.den) && slices.Equal(a.codes, b.codes)
	}
	if !same(r512, rGo) || !same(r2, rGo) {
		t.Fatalf("%s (n %d, bits %d, grid %v, weighted %v):\navx512 %v %v %v %v\navx2   %v %v %v %v\nGo     %v %v %v %v",
			name, len(x), bits, grid, wd != nil, r512.s, r512.err, r512.den, r512.codes, r2.s, r2.err, r2.den, r2.codes, rGo.s, rGo.err, rGo.den, rGo.codes)
	}
	if want := chooseScaleRef(x, wd, bits, grid); math.Float32bits(rGo.s) != math.Float32bits(want) {
		t.Fatalf("%s: scale %v, reference %v", name, rGo.s, want)
	}
}

// TestGroupSearchMatchesGo: the AVX-512 group search (searchGroup through kernel.GroupSearch8,
// codes through kernel.QuantCodes8) gives bit for bit the scale, error, Σ wd·x² and codes of the
// AVX2 kernels and of the pure-Go path — heavy tails, exact rounding boundaries, ±0, denormals,
// 3e38, all-zero groups, grids of 1 to 8 factors (with a factor 0) and of 9, weighted or not,
// groups of 1 to 600 values, int4 and int8.
func TestGroupSearchMatchesGo(t *testing.T) {
	if !kernel.Available512 {
		testfiles.SkipCPU(t, "no AVX-512 on this CPU: searchGroup is chooseScaleErr and sqNorm")
	}
	rng := rand.New(rand.NewPCG(17, 19))
	for i := 0; i < 20000; i++ {
		n := 1 + rng.IntN(600)
		if i%3 == 0 {
			n = 32
		}
		x := clipCase(rng, n)
		if i%97 == 0 {
			x = make([]float64, n) // all zero
		}
		var wd []float64
		if i%2 == 1 {
			wd = make([]float64, n)
			for k := range wd {
				wd[k] = rng.ExpFloat64()
			}
		}
		grid := append([]float64(nil), DefaultClipGrid[:1+rng.IntN(8)]...)
		if len(grid) <= clipLanes/2 && i%4 != 0 {
			grid = append(grid, DefaultClipGrid[len(grid):5]...) // mostly grids the AVX-512 kernel takes
		}
		if i%13 == 0 {
			grid = []float64{DefaultClipGrid[rng.IntN(len(DefaultClipGrid))]} // one factor: quantGroup1
		}
		if i%11 == 0 {
			grid[rng.IntN(len(grid))] = 0
		}
		if i%101 == 0 {
			grid = append(grid, 0.5) // past eight factors: the AVX2 path
		}
		bits := 4
		if i%5 == 0 {
			bits = 8
		}
		checkGroupSearch(t, "case "+strconv.Itoa(i), x, wd, bits, grid)
	}
}

// FuzzGroupSearch: for arbitrary finite float32 groups (RTNStream refuses non-finite weights) and
// weights, grids and widths taken from the input, the AVX-512, AVX2 and pure-Go searches agree
// bit for bit (checkGroupSearch). The first byte chooses bits (bit 0), weighting (bit 1) and the
// grid length (bits 2-4, 1 to 8 factors of DefaultClipGrid; bit 5 zeroes its last factor); the
// rest are little-endian float32s, the group then (weighted) as many weights. Seeds are in
// testdata/fuzz/FuzzGroupSearch and below.
func FuzzGroupSearch(f *testing.F) {
	if !kernel.Available512 {
		testfiles.SkipCPU(f, "no AVX-512 on this CPU")
	}
	le := encodeSearchFuzz
	ramp := make([]float32, 32)
	for i := range ramp {
		ramp[i] = (float32(i) - 15.5) / 7
	}
	f.Add(le(0x1c, ramp...)) // int4, unweighted, eight factors
	f.Add(le(0x1f, ramp...)) // int8, weighted (16 values, 16 weights)
	f.Add(le(0x00, 0.5, -0.5, 1.5, -2.5, 0, float32(math.Copysign(0, -1)), 1e-45, 3e38))
	f.Add(le(0x3e, 7, 6.5, -8, 5.5, 1, 1, 1, 1))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, ok := decodeSearchFuzz(raw)
		if !ok {
			return
		}
		x := make([]float64, len(c.x))
		for i, v := range c.x {
			x[i] = float64(v)
		}
		var wd []float64
		if c.wd != nil {
			wd = make([]float64, len(c.wd))
			for i, v := range c.wd {
				wd[i] = float64(v)
			}
		}
		checkGroupSearch(t, "fuzz", x, wd, c.bits, c.grid)
	})
}

// TestGroupSearchRoundsHalfAway: the AVX-512 kernel's rounding (trunc(y + copysign(0.49999999999999994,
// y))) is math.Round for every kind of finite value — halves, their neighbours, integers, tiny
// values, and the ranges near 2^51 to 2^53 where adding a half rounds — seen through the error of
// one value at scale 1 with no clamping.
func TestGroupSearchRoundsHalfAway(t *testing.T) {
	if !kernel.Available512 {
		testfiles.SkipCPU(t, "no AVX-512 on this CPU")
	}
	rng := rand.New(rand.NewPCG(23, 29))
	var vals []float64
	for i := 0; i < 100000; i++ {
		k := float64(rng.Int64N(1<<52)) * []float64{1, 1e-9, 1e-3, 1}[i%4]
		k = math.Trunc(k)
		h := k + 0.5
		vals = append(vals, h, math.Nextafter(h, 0), math.Nextafter(h, math.Inf(1)), k, rng.NormFloat64()*math.Ldexp(1, rng.IntN(120)-60))
	}
	for e := 50; e <= 54; e++ {
		for d := -8.0; d <= 8; d += 0.25 {
			vals = append(vals, math.Ldexp(1, e)+d)
		}
	}
	vals = append(vals, 0.5, 0.49999999999999994, 1.5, 2.5, math.SmallestNonzeroFloat64, 1e300)
	var grid [8]float64
	grid[0] = 1
	lohi := [2]float64{-math.MaxFloat64, math.MaxFloat64}
	var s, errs [8]float64
	for _, v := range vals {
		for _, x := range []float64{v, -v} {
			if x == 0 {
				continue
			}
			kernel.GroupSearch8(&x, nil, 1, &grid, 1, math.Abs(x), &lohi, &s, &errs)
			if s[0] != 1 {
				continue // |x|/|x| rounded to float32 is 1 unless x is not finite
			}
			d := x - math.Round(x)
			if want := d * d; math.Float64bits(errs[0]) != math.Float64bits(want) {
				t.Fatalf("x = %v (%#x): kernel error %v, math.Round gives %v (round %v)", x, math.Float64bits(x), errs[0], want, math.Round(x))
			}
		}
	}
}

// TestNonFiniteMatchesScalar: the kernel's finite check finds ±Inf and NaN (quiet, signalling,
// any sign) at every position of vectors of 0 to 80 values and nothing in finite ones (denormals,
// ±0, ±MaxFloat32).
func TestNonFiniteMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 37))
	bad := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00000), math.Float32frombits(0x7fbfffff)}
	for n := 0; n <= 80; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(clipCase(rng, 1)[0])
			if i%7 == 3 {
				x[i] = []float32{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Copysign(0, -1))}[i%4]
			}
		}
		if nonFinite(x) {
			t.Fatalf("n %d: finite values reported non-finite: %v", n, x)
		}
		for i := range x {
			y := append([]float32(nil), x...)
			y[i] = bad[(n+i)%len(bad)]
			if !nonFinite(y) {
				t.Fatalf("n %d: %v at %d not found", n, y[i], i)
			}
		}
	}
}

// searchFuzzCase is a group-search fuzz input as FuzzGroupSearch and FuzzGroupSearch32 read it: the
// first byte (head) chooses bits (bit 0), weighting (bit 1) and the grid length (bits 2-4, 1 to 8
// factors of DefaultClipGrid; bit 5 zeroes its last factor); the rest are little-endian float32s
// (NaN and Inf read as 0), the group then, when weighted, as many weights (as read).
type searchFuzzCase struct {
	head  byte
	bits  int
	grid  []float64
	x, wd []float32
}

// encodeSearchFuzz is a fuzz input of head and vals.
func encodeSearchFuzz(head byte, vals ...float32) []byte {
	b := []byte{head}
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// decodeSearchFuzz reads raw; false when it holds no group or more than 1024 values.
func decodeSearchFuzz(raw []byte) (searchFuzzCase, bool) {
	if len(raw) < 5 || len(raw) > 1+4*2*1024 {
		return searchFuzzCase{}, false
	}
	head, vals := raw[0], raw[1:]
	c := searchFuzzCase{head: head, bits: []int{4, 8}[head&1],
		grid: append([]float64(nil), DefaultClipGrid[:1+int(head>>2&7)]...)}
	if head&0x20 != 0 {
		c.grid[len(c.grid)-1] = 0
	}
	n := len(vals) / 4
	weighted := head&2 != 0
	if weighted {
		n /= 2
	}
	if n == 0 {
		return searchFuzzCase{}, false
	}
	f32 := func(i int) float32 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(vals[4*i:]))
		if v != v || math.IsInf(float64(v), 0) {
			v = 0
		}
		return v
	}
	c.x = make([]float32, n)
	for i := range c.x {
		c.x[i] = f32(i)
	}
	if weighted {
		c.wd = make([]float32, n)
		for i := range c.wd {
			c.wd[i] = f32(n + i)
		}
	}
	return c, true
}
