package quant

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/quant/internal/kernel"
)

// group32Result is one float32 group search: its answers and codes.
type group32Result struct {
	s         float32
	err, den  float64
	best      int
	codes     []int8
	untouched bool // every code still holds the sentinel
}

// paths32 are the float32 search's paths this CPU can run.
func paths32() []int {
	p := []int{path32Go}
	if kernel.Available {
		p = append(p, path32AVX2)
	}
	if kernel.Available512 {
		p = append(p, path32AVX512)
	}
	return p
}

func runGroup32(path int, x, wd []float32, bits int, grid []float64) group32Result {
	old := search32Path
	defer func() { search32Path = old }()
	search32Path = path
	var g8 [clipLanes]float64
	for j := range g8 {
		g8[j] = 0.95 // lanes past the grid must not count
	}
	copy(g8[:], grid)
	lo, hi := codeRange(bits)
	lohi := [2]float32{float32(lo), float32(hi)}
	r := group32Result{codes: make([]int8, len(x))}
	for k := range r.codes {
		r.codes[k] = 99
	}
	r.s, r.err, r.den, r.best = groupSearch32(r.codes, x, wd, &g8, len(grid), qmax(bits), &lohi)
	r.untouched = !slices.ContainsFunc(r.codes, func(c int8) bool { return c != 99 })
	return r
}

// checkGroup32 fails t unless the AVX-512 and AVX2 kernels and groupSearch32Go agree bit for bit
// on x (each kernel where the CPU has it), and the reference's answer is what its contract says
// (checkGroup32Contract).
func checkGroup32(t *testing.T, name string, x, wd []float32, bits int, grid []float64) {
	t.Helper()
	rGo := runGroup32(path32Go, x, wd, bits, grid)
	for _, path := range paths32()[1:] {
		rK := runGroup32(path, x, wd, bits, grid)
		if math.Float32bits(rK.s) != math.Float32bits(rGo.s) || math.Float64bits(rK.err) != math.Float64bits(rGo.err) ||
			math.Float64bits(rK.den) != math.Float64bits(rGo.den) || rK.best != rGo.best || !slices.Equal(rK.codes, rGo.codes) ||
			rK.untouched != rGo.untouched {
			t.Fatalf("%s (n %d, bits %d, grid %v, weighted %v):\nkernel %d: %v %v %v best %d %v\nGo        %v %v %v best %d %v\nx = %v",
				name, len(x), bits, grid, wd != nil, path, rK.s, rK.err, rK.den, rK.best, rK.codes, rGo.s, rGo.err, rGo.den, rGo.best, rGo.codes, x)
		}
	}
	checkGroup32Contract(t, name, x, wd, bits, grid, rGo)
}

// checkGroup32Contract checks the reference against float64 arithmetic: the codes are the chosen
// scale's round-half-away codes (up to float32 rounding at the halves), err is Σ wd·(x − s·q)²
// within float32 precision, no other factor's float64 error is clearly lower, den is Σ wd·x²
// (within float32 precision and its underflow).
func checkGroup32Contract(t *testing.T, name string, x, wd []float32, bits int, grid []float64, r group32Result) {
	t.Helper()
	amax := 0.0
	for _, v := range x {
		amax = max(amax, math.Abs(float64(v)))
	}
	if amax != 0 && (amax < min32Amax || amax > max32Amax) {
		if r.best != bestOutRange || !r.untouched {
			t.Fatalf("%s: amax %v outside the float32 range: best %d, codes written %v", name, amax, r.best, !r.untouched)
		}
		return
	}
	lo, hi := codeRange(bits)
	sqErr := func(s float64, codes []int8) float64 {
		e := 0.0
		for k, v := range x {
			d := float64(v) - s*float64(codes[k])
			w := 1.0
			if wd != nil {
				w = float64(wd[k])
			}
			e += w * d * d
		}
		return e
	}
	den := 0.0
	for k, v := range x {
		w := 1.0
		if wd != nil {
			w = float64(wd[k])
		}
		den += w * float64(v) * float64(v)
	}
	// Each float32 product wd·x·x may underflow: at most about 2^-149·(amax+1) lost per value.
	if !close64(r.den, den, 1e-5) && math.Abs(r.den-den) > float64(len(x))*0x1p-148*(amax+1) {
		t.Fatalf("%s: den %v, float64 %v", name, r.den, den)
	}
	if r.best < 0 {
		if r.s != 0 || slices.ContainsFunc(r.codes, func(c int8) bool { return c != 0 }) {
			t.Fatalf("%s: best %d with scale %v and codes %v", name, r.best, r.s, r.codes)
		}
		return
	}
	s := float64(r.s)
	if want := float32(grid[r.best] * amax / qmax(bits)); r.s != want {
		t.Fatalf("%s: scale %v, factor %d gives %v", name, r.s, r.best, want)
	}
	codesFor := func(s float64) []int8 {
		c := make([]int8, len(x))
		for k, v := range x {
			c[k] = int8(max(float64(lo), min(float64(hi), math.Round(float64(v)/s))))
		}
		return c
	}
	for k, c := range codesFor(s) {
		if d := int(r.codes[k]) - int(c); d < -1 || d > 1 {
			t.Fatalf("%s: code %d = %d, x/s rounds to %d", name, k, r.codes[k], c)
		}
	}
	if e := sqErr(s, r.codes); !close64(r.err, e, 1e-4) && math.Abs(r.err-e) > 1e-5*s*s*float64(len(x)) {
		t.Fatalf("%s: err %v, float64 %v", name, r.err, e)
	}
	for j, f := range grid {
		sj := float64(float32(f * amax / qmax(bits)))
		if sj == 0 {
			continue
		}
		if e := sqErr(sj, codesFor(sj)); e < r.err*(1-1e-4)-1e-5*s*s*float64(len(x)) {
			t.Fatalf("%s: chose factor %d (err %v), factor %d has %v", name, r.best, r.err, j, e)
		}
	}
}

func close64(a, b, rel float64) bool {
	return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b))
}

// group32Case draws a float32 group: heavy tails, exact halves of a likely scale, ±0, magnitudes
// from 1e-14 to 1e10 (the float32 range and past it on both sides).
func group32Case(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	scale := math.Pow(10, float64(rng.IntN(25)-14))
	for i := range x {
		switch rng.IntN(10) {
		case 0:
			x[i] = 0
		case 1:
			x[i] = float32(math.Copysign(0, -1))
		case 2:
			x[i] = float32(float64(rng.IntN(15)-7)+0.5) * float32(scale) / 7
		case 3:
			x[i] = float32(rng.NormFloat64() * scale * 1e-30)
		default:
			x[i] = float32(rng.NormFloat64() * rng.ExpFloat64() * scale)
		}
	}
	if rng.IntN(20) == 0 {
		x[rng.IntN(n)] = 3e38
	}
	return x
}

// TestGroupSearch32MatchesGo: the AVX-512 float32 search (kernel.GroupSearch16) and the AVX2 one
// (kernel.ErrSums16x2, kernel.Codes16x2) give bit for bit
// groupSearch32Go's scale, error, Σ wd·x², choice and codes, and writes every code (none for a
// group outside the float32 range) — groups of 1 to 600 values (partial last chunks), weighted or
// not, grids of 1 to 8 factors with zero and negative factors, int4 and int8, all-zero groups and
// magnitudes past the float32 range; the reference meets its contract against float64 arithmetic.
func TestGroupSearch32MatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 43))
	cases := 20000
	if !kernel.Available {
		cases = 2000 // the contract check alone
	}
	for i := 0; i < cases; i++ {
		n := 1 + rng.IntN(600)
		switch i % 4 {
		case 0:
			n = 32
		case 1:
			n = 1 + rng.IntN(40)
		}
		x := group32Case(rng, n)
		if i%97 == 0 {
			x = make([]float32, n)
		}
		var wd []float32
		if i%2 == 1 {
			wd = make([]float32, n)
			for k := range wd {
				wd[k] = float32(rng.Float64())
				if k%9 == 4 {
					wd[k] = 0
				}
			}
		}
		grid := append([]float64(nil), DefaultClipGrid[:1+rng.IntN(8)]...)
		if i%11 == 0 {
			grid[rng.IntN(len(grid))] = 0
		}
		if i%17 == 0 {
			grid[rng.IntN(len(grid))] *= -1
		}
		bits := 4
		if i%5 == 0 {
			bits = 8
		}
		checkGroup32(t, "case "+strconv.Itoa(i), x, wd, bits, grid)
	}
}

// TestRoundAway32: roundAway32 is math.Round for float32 halves, their neighbours, integers and
// values up to 2^25 where adding the near-half rounds.
func TestRoundAway32(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 53))
	var vals []float32
	for i := 0; i < 100000; i++ {
		k := float32(rng.IntN(1 << 24))
		h := k + 0.5
		vals = append(vals, h, math.Nextafter32(h, 0), math.Nextafter32(h, float32(math.Inf(1))), k, float32(rng.NormFloat64()*math.Ldexp(1, rng.IntN(60)-30)))
	}
	for e := 20; e <= 26; e++ {
		for d := float32(-8); d <= 8; d += 0.25 {
			vals = append(vals, float32(math.Ldexp(1, e))+d)
		}
	}
	vals = append(vals, 0.5, math.Nextafter32(0.5, 0), 1.5, 2.5, math.SmallestNonzeroFloat32, 3e38)
	for _, v := range vals {
		for _, y := range []float32{v, -v} {
			if got, want := roundAway32(y), float32(math.Round(float64(y))); math.Float32bits(got) != math.Float32bits(want) && got != want {
				t.Fatalf("roundAway32(%v) = %v, math.Round gives %v", y, got, want)
			}
		}
	}
}

// FuzzGroupSearch32: for arbitrary finite float32 groups and weights, grids and widths taken from
// the input, the AVX-512, AVX2 and pure-Go float32 searches agree bit for bit and meet the contract
// (checkGroup32). The first byte chooses bits (bit 0), weighting (bit 1) and the grid length (bits
// 2-4, 1 to 8 factors of DefaultClipGrid; bit 5 zeroes its last factor, bit 6 negates its
// first); the rest are little-endian float32s, the group then (weighted) as many weights (their
// magnitudes, below 1).
func FuzzGroupSearch32(f *testing.F) {
	le := encodeSearchFuzz
	ramp := make([]float32, 32)
	for i := range ramp {
		ramp[i] = (float32(i) - 15.5) / 7
	}
	f.Add(le(0x1c, ramp...))
	f.Add(le(0x1f, ramp...))
	f.Add(le(0x5c, ramp[:17]...))
	f.Add(le(0x00, 0.5, -0.5, 1.5, -2.5, 0, float32(math.Copysign(0, -1)), 1e-45, 3e38))
	f.Add(le(0x3e, 7, 6.5, -8, 5.5, 1, 1, 1, 1))
	f.Add(le(0x1c, 1e-13, -2e-13, 5e-14))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, ok := decodeSearchFuzz(raw)
		if !ok {
			return
		}
		if c.head&0x40 != 0 {
			c.grid[0] = -c.grid[0]
		}
		for i, v := range c.wd { // magnitudes below 1
			c.wd[i] = float32(math.Abs(math.Mod(float64(v), 1)))
		}
		checkGroup32(t, "fuzz", c.x, c.wd, c.bits, c.grid)
	})
}

// TestRTN32Paths: a whole RTN (weighted and not, a partial last group, rows outside the float32
// range that take the float64 search, a grid of one factor and one the float32 search does not
// take) gives the same codes, scales and QErr with each kernel and with the pure-Go reference, and
// on one worker and three.
func TestRTN32Paths(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(59, 61))
	n, k := 24, 80
	m := Matrix{Name: "w", Rows: n, Cols: k, Data: make([]float32, n*k)}
	for i := range m.Data {
		m.Data[i] = float32(rng.NormFloat64())
	}
	for c := 0; c < k; c++ {
		m.Data[3*k+c] *= 1e20  // outside the float32 range: float64 search
		m.Data[5*k+c] *= 1e-20 // likewise, below it
		m.Data[7*k+c] = 0
	}
	imp := make([]float64, k)
	for c := range imp {
		imp[c] = rng.ExpFloat64() * 1e12
	}
	for _, grid := range [][]float64{DefaultClipGrid, {1}, {1, 0.5}, append(append([]float64(nil), DefaultClipGrid...), 0.7)} {
		for _, weighted := range []bool{false, true} {
			var ref *Weight
			for _, path := range paths32() {
				for _, workers := range []int{1, 3} {
					old := search32Path
					search32Path = path
					var w *Weight
					var err error
					opts := []Option{WithClipGrid(grid), WithGroup(32), WithWorkers(workers)}
					if weighted {
						w, err = RTNImportance(ctx, m, imp, opts...)
					} else {
						w, err = RTN(ctx, m, nil, opts...)
					}
					search32Path = old
					if err != nil {
						t.Fatal(err)
					}
					if ref == nil {
						ref = w
						continue
					}
					if !slices.Equal(w.Codes, ref.Codes) || !slices.EqualFunc(w.Scales, ref.Scales, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) ||
						math.Float64bits(w.QErr) != math.Float64bits(ref.QErr) {
						t.Fatalf("grid %v weighted %v path %d workers %d: differs from the pure-Go path (QErr %v vs %v)", grid, weighted, path, workers, w.QErr, ref.QErr)
					}
				}
			}
			if ref.QErr <= 0 || ref.QErr > 0.3 {
				t.Fatalf("grid %v weighted %v: QErr %v", grid, weighted, ref.QErr)
			}
		}
	}
}

// TestGroupSearch32RoundsHalfAway: groups whose scale is exactly 1 (amax 7 for int4, 127 for
// int8, factor 1) put x itself through the kernel's rounding: halves, their float32 neighbours and
// integers give the reference's codes and errors (checkGroup32), so a kernel that rounds a
// near-half up, or a code's tie to even, fails — alone and as the first of several candidates,
// whose error sums the kernel takes with ties to even.
func TestGroupSearch32RoundsHalfAway(t *testing.T) {
	for _, bits := range []int{4, 8} {
		top := float32(qmax(bits))
		var x []float32
		for k := float32(0); k < top; k++ {
			h := k + 0.5
			x = append(x, h, math.Nextafter32(h, 0), math.Nextafter32(h, top), k)
		}
		for i := range x {
			x = append(x, -x[i])
		}
		for start := 0; start < len(x); start += 31 {
			g := append([]float32{top}, x[start:min(start+31, len(x))]...)
			checkGroup32(t, "halves int"+strconv.Itoa(bits), g, nil, bits, []float64{1})
			// The same halves as the first of several candidates: the search's error sums round
			// them half to even (NEAR32), which must give the reference's bits; weighted too.
			wd := make([]float32, len(g))
			for k := range wd {
				wd[k] = float32(k%7+1) / 8
			}
			for _, grid := range [][]float64{{1, 0.9375}, DefaultClipGrid} {
				checkGroup32(t, "halves, several candidates, int"+strconv.Itoa(bits), g, nil, bits, grid)
				checkGroup32(t, "halves, several candidates, weighted, int"+strconv.Itoa(bits), g, wd, bits, grid)
			}
			r := runGroup32(path32Go, g, nil, bits, []float64{1})
			for k, v := range g {
				if want := int8(max(-top, min(top, float32(math.Round(float64(v)))))); r.codes[k] != want {
					t.Fatalf("int%d: %v coded %d, want %d", bits, v, r.codes[k], want)
				}
			}
		}
	}
}

// rowKernelPaths are the kernel paths on which quantizeRow32 takes quantizeRowKernel32
// (kernel.RowOne16x8, kernel.RowOne16x8AVX2, kernel.RowSearch16x2) that this CPU can run.
func rowKernelPaths() []int {
	var p []int
	for _, path := range paths32() {
		if path != path32Go {
			p = append(p, path)
		}
	}
	return p
}

// rowCase quantizes row x (len kp), weighted by wd (nil: unweighted; as weights32 gives them), with
// bits, group and grid on the float32 search's path (path32AVX2 or path32AVX512) with its row
// kernel where quantizeRow32 takes one (rowKernels32) and group by group, and reports the first
// difference in codes, scales (bits) or the row's error sums (bits).
func rowCase(path int, x []float32, wd []float64, bits, group int, grid []float64) string {
	wd32, wd64 := weights32(wd)
	kp := len(x)
	run := func(kernels bool) ([]int8, []float32, float64, float64) {
		old, oldPath := rowKernels32, search32Path
		defer func() { rowKernels32, search32Path = old, oldPath }()
		rowKernels32, search32Path = kernels, path
		w := &Weight{N: 1, K: kp, KP: kp, Bits: bits, Group: group}
		w.Scales = make([]float32, w.Groups())
		codes := make([]int8, kp)
		for i := range codes {
			codes[i] = 99 // a code no path writes
		}
		num, den := quantizeRow32(w, 0, codes, x, wd32, wd64, grid, newSearch32(grid, kp))
		return codes, w.Scales, num, den
	}
	c1, s1, n1, d1 := run(true)
	c0, s0, n0, d0 := run(false)
	if i := slices.Compare(c1, c0); i != 0 {
		return "codes differ"
	}
	for i := range s1 {
		if math.Float32bits(s1[i]) != math.Float32bits(s0[i]) {
			return "scale " + strconv.Itoa(i) + " differs"
		}
	}
	if math.Float64bits(n1) != math.Float64bits(n0) || math.Float64bits(d1) != math.Float64bits(d0) {
		return "error sums differ"
	}
	return ""
}

// TestRowKernels32: the row kernels (kernel.RowOne16x8 and kernel.RowOne16x8AVX2 for a grid of one
// factor, eight whole groups side by side; kernel.RowSearch16x2 for any grid on the AVX2 path; each
// where the CPU has it) and the groups quantizeRowKernel32 leaves to the group-by-group path give
// quantizeRow32's group-by-group codes, scales and error sums bit for bit — on rows of whole blocks
// and a partial last block or group, groups of zeros, groups outside the float32 range on either
// side (the float64 search), factors of 0 (no scale), equal factors (the first wins), exact halves,
// weighted rows (kernel.RowSearch16x2; weights of 0 among them), 4 and 8 bits.
func TestRowKernels32(t *testing.T) {
	if len(rowKernelPaths()) == 0 {
		testfiles.SkipCPU(t, "no AVX2 on this CPU: quantizeRowKernel32 never runs")
	}
	grids := [][]float64{{1}, {0.85}, {0}, DefaultClipGrid, {1, 0.5}, {0.9, 1, 0.8}, {1, 1, 1, 1, 1},
		{0, 1, 0.9375, 0, 0.875}, {1, 0.97, 0.94, 0.91, 0.88, 0.85, 0.82}, {0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.2}}
	rng := rand.New(rand.NewPCG(71, 73))
	for _, tc := range []struct{ kp, group int }{{32, 32}, {80, 32}, {256, 32}, {1064, 32}, {1024, 64}, {4096, 32}, {96, 64}, {100, 16}, {272, 16}, {17, 17}, {5, 32}, {40, 0}, {33, 1}} {
		for _, bits := range []int{4, 8} {
			for _, grid := range grids {
				for trial := range 20 {
					x := make([]float32, tc.kp)
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					g := tc.group
					if g == 0 {
						g = tc.kp
					}
					for gi := 0; gi*g < tc.kp; gi++ {
						a, b := gi*g, min((gi+1)*g, tc.kp)
						switch (trial + gi) % 6 {
						case 1:
							clear(x[a:b])
						case 2:
							for i := a; i < b; i++ {
								x[i] *= 1e20
							}
						case 3:
							for i := a; i < b; i++ {
								x[i] *= 1e-20
							}
						case 4: // scale exactly 1: x's own halves go through the rounding
							for i := a; i < b; i++ {
								x[i] = float32(math.Round(rng.Float64()*2*qmax(bits))-qmax(bits)) / 2
							}
							x[a] = float32(qmax(bits))
						}
					}
					var wd []float64 // weighted in every third trial: some weights 0, the others spread
					if trial%3 == 2 {
						wd = make([]float64, tc.kp)
						for i := range wd {
							if i%7 != 3 {
								wd[i] = rng.ExpFloat64() * 1e6
							}
						}
					}
					for _, path := range rowKernelPaths() {
						if d := rowCase(path, x, wd, bits, tc.group, grid); d != "" {
							t.Fatalf("path %d kp %d group %d bits %d grid %v trial %d weighted %v: %s", path, tc.kp, tc.group, bits, grid, trial, wd != nil, d)
						}
					}
				}
			}
		}
	}
}

// TestRowKernelsDone: the row kernels take ordinary groups themselves (their done bits or bytes
// set) and give back a group of zeros and groups past the float32 range on either side: a kernel
// that gave back every group would pass the bit-for-bit tests above while every group took the
// slow path.
func TestRowKernelsDone(t *testing.T) {
	if len(rowKernelPaths()) == 0 {
		testfiles.SkipCPU(t, "no AVX2 on this CPU: quantizeRowKernel32 never runs")
	}
	const group = 32
	rng := rand.New(rand.NewPCG(79, 83))
	x := make([]float32, 16*group) // two blocks
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	clear(x[2*group : 3*group])
	for i := 5 * group; i < 6*group; i++ {
		x[i] *= 1e20
	}
	for i := 12 * group; i < 13*group; i++ {
		x[i] *= 1e-20
	}
	given := map[int]bool{2: true, 5: true, 12: true}
	lohi := [2]float32{-8, 7}
	var consts [4 * clipLanes]float32
	setConsts32(&consts, &lohi)
	grid := [clipLanes]float64{1, 0.9, 0.8}
	for _, kern := range []string{"RowOne16x8", "RowOne16x8AVX2", "RowSearch16x2"} {
		if kern == "RowOne16x8" && !kernel.Available512 {
			continue
		}
		codes := make([]int8, len(x))
		scales := make([]float32, 16)
		errs, dens := make([]float64, 16), make([]float64, 16)
		done := make([]uint8, 16)
		taken := func(gi int) bool { return done[gi/8]>>(gi%8)&1 != 0 }
		switch kern {
		case "RowOne16x8":
			kernel.RowOne16x8(&x[0], 2, group, 1, qmax(4), &lohi, &codes[0], &scales[0], &errs[0], &dens[0], &done[0])
		case "RowOne16x8AVX2":
			kernel.RowOne16x8AVX2(&x[0], 2, group, 1, qmax(4), &consts, &codes[0], &scales[0], &errs[0], &dens[0], &done[0])
		default:
			kernel.RowSearch16x2(&x[0], nil, 16, group, &grid, 3, qmax(4), &consts, &codes[0], &scales[0], &errs[0], &dens[0], &done[0])
			taken = func(gi int) bool { return done[gi] == 1 }
		}
		for gi := range 16 {
			if taken(gi) == given[gi] {
				t.Errorf("%s: group %d taken %v, want %v", kern, gi, taken(gi), !given[gi])
			}
		}
	}
}

// TestRowSearch32Lanes: kernel.RowSearch16x2 searches the first lanes factors of its grid only: a
// better factor past them is never chosen.
func TestRowSearch32Lanes(t *testing.T) {
	if !kernel.Available {
		testfiles.SkipCPU(t, "no AVX2 on this CPU: kernel.RowSearch16x2 never runs")
	}
	const group, groups = 32, 8
	rng := rand.New(rand.NewPCG(89, 97))
	x := make([]float32, groups*group)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	lohi := [2]float32{-8, 7}
	var consts [4 * clipLanes]float32
	setConsts32(&consts, &lohi)
	grid := [clipLanes]float64{1.25, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9}
	codes := make([]int8, len(x))
	scales := make([]float32, groups)
	errs, dens := make([]float64, groups), make([]float64, groups)
	done := make([]uint8, groups)
	kernel.RowSearch16x2(&x[0], nil, groups, group, &grid, 1, qmax(4), &consts, &codes[0], &scales[0], &errs[0], &dens[0], &done[0])
	for gi := range groups {
		want := runGroup32(path32Go, x[gi*group:(gi+1)*group], nil, 4, grid[:1])
		if done[gi] != 1 || math.Float32bits(scales[gi]) != math.Float32bits(want.s) || !slices.Equal(codes[gi*group:(gi+1)*group], want.codes) {
			t.Fatalf("group %d: done %d, scale %v, want %v (factor 1.25 alone)", gi, done[gi], scales[gi], want.s)
		}
	}
}

// FuzzRowKernels32: the row kernels against quantizeRow32's group-by-group path on arbitrary
// float32 rows (finite: RTN refuses the others before quantizing), with a grid of one factor and
// the default grid, and weighted with the default grid.
func FuzzRowKernels32(f *testing.F) {
	if len(rowKernelPaths()) == 0 {
		testfiles.SkipCPU(f, "no AVX2 on this CPU: quantizeRowKernel32 never runs")
	}
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 192}, uint8(32), false)
	f.Add(make([]byte, 160), uint8(16), true)
	seed := make([]byte, 4*1040) // eight blocks of eight groups of 16 and a partial group
	for i := 0; i < len(seed); i += 4 {
		b := math.Float32bits(float32(math.Sin(float64(i))) * float32(i%97+1))
		seed[i], seed[i+1], seed[i+2], seed[i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
	}
	f.Add(seed, uint8(16), false)
	f.Add(seed, uint8(32), true)
	f.Fuzz(func(t *testing.T, raw []byte, group uint8, eight bool) {
		x := make([]float32, 0, len(raw)/4)
		for i := 0; i+4 <= len(raw); i += 4 {
			v := math.Float32frombits(uint32(raw[i]) | uint32(raw[i+1])<<8 | uint32(raw[i+2])<<16 | uint32(raw[i+3])<<24)
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				v = 0
			}
			x = append(x, v)
		}
		if len(x) == 0 {
			return
		}
		bits := 4
		if eight {
			bits = 8
		}
		for _, path := range rowKernelPaths() {
			for _, grid := range [][]float64{{1}, DefaultClipGrid} {
				if d := rowCase(path, x, nil, bits, int(group), grid); d != "" {
					t.Fatalf("path %d group %d bits %d grid %v row %v: %s", path, group, bits, grid, x, d)
				}
			}
			// Weighted by the values' own magnitudes, every fifth weight 0.
			wd := make([]float64, len(x))
			for i, v := range x {
				if i%5 != 0 {
					wd[i] = math.Abs(float64(v)) + 1
				}
			}
			if d := rowCase(path, x, wd, bits, int(group), DefaultClipGrid); d != "" {
				t.Fatalf("path %d group %d bits %d weighted row %v: %s", path, group, bits, x, d)
			}
		}
	})
}

// absMax32Ref is absMax32's contract in floats: the running max of |x_k| (Go's max: NaN wins).
func absMax32Ref(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

func checkAbsMax32(t *testing.T, x []float32) {
	t.Helper()
	got, want := absMax32(x), absMax32Ref(x)
	if math.Float32bits(got) != math.Float32bits(want) && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want))) {
		t.Fatalf("absMax32 of %d values = %v (%#x), want %v (%#x)", len(x), got, math.Float32bits(got), want, math.Float32bits(want))
	}
}

// TestAbsMax32: the kernel's integer maxima of the sign-cleared patterns give max |x_k| for every
// length (whole blocks of 8 and 16, and tails), with the largest value anywhere, and NaN for a NaN
// anywhere; infinities, -0, subnormals and the float32 extremes included.
func TestAbsMax32(t *testing.T) {
	rng := rand.New(rand.NewPCG(67, 71))
	nan := float32(math.NaN())
	specials := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)),
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32}
	for n := 0; n <= 70; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		checkAbsMax32(t, x)
		for at := 0; at < n; at++ {
			y := slices.Clone(x)
			y[at] = -1e3
			checkAbsMax32(t, y)
			y[at] = nan
			checkAbsMax32(t, y)
			y[at] = -nan
			checkAbsMax32(t, y)
			y[at] = specials[at%len(specials)]
			checkAbsMax32(t, y)
		}
	}
}

// FuzzAbsMax32: absMax32 agrees with the float reference on arbitrary float32 bit patterns.
func FuzzAbsMax32(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0xc0, 0xff, 1, 0, 0, 0x80})
	f.Add(make([]byte, 4*37))
	f.Fuzz(func(t *testing.T, raw []byte) {
		x := make([]float32, len(raw)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		checkAbsMax32(t, x)
	})
}
