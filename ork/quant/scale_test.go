package quant

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"regexp"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/quant/internal/kernel"
)

// TestNegativeScalesNeverWorse: with negative scales the candidates are a superset of the positive
// ones, so RTN's weighted error of every weight can only fall; on stories260K it falls in total, some
// chosen scales are negative, those groups use code -8, and int8 weights are unchanged (their code
// range is symmetric).
func TestNegativeScalesNeverWorse(t *testing.T) {
	ws := loadMatmulWeights(t, testfiles.Path(t, "stories260K.gguf"), regexp.MustCompile(`.`))
	ctx := context.Background()
	var sumPos, sumNeg float64
	negGroups, negMinus8 := 0, 0
	for _, w := range ws {
		for _, rot := range []bool{false, true} {
			opts := []Option{WithWorkers(2), WithGroup(32)}
			if rot {
				opts = append(opts, WithRotation(true, 5))
			}
			p, err := RTN(ctx, w, nil, opts...)
			if err != nil {
				t.Fatal(err)
			}
			n, err := RTN(ctx, w, nil, append(opts, WithNegativeScales(true))...)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Validate(); err != nil {
				t.Fatal(err)
			}
			if n.QErr > p.QErr {
				t.Errorf("%s rotated %v: qerr with negative scales %.6g above positive-only %.6g", w.Name, rot, n.QErr, p.QErr)
			}
			sumPos += p.QErr
			sumNeg += n.QErr
			g := effGroup(n.KP, n.Group)
			for i, s := range n.Scales {
				if s >= 0 {
					continue
				}
				negGroups++
				row, gi := i/n.Groups(), i%n.Groups()
				for _, c := range n.Codes[row*n.KP+gi*g : row*n.KP+min((gi+1)*g, n.KP)] {
					if c == -8 {
						negMinus8++
						break
					}
				}
			}
		}
		p8, err := RTN(ctx, w, nil, WithBits(8), WithGroup(0))
		if err != nil {
			t.Fatal(err)
		}
		n8, err := RTN(ctx, w, nil, WithBits(8), WithGroup(0), WithNegativeScales(true))
		if err != nil {
			t.Fatal(err)
		}
		for i := range p8.Scales {
			if p8.Scales[i] != n8.Scales[i] {
				t.Fatalf("%s int8: scale %d changed with negative scales: %v -> %v", w.Name, i, p8.Scales[i], n8.Scales[i])
			}
		}
	}
	if !(sumNeg < sumPos) || negGroups == 0 || negMinus8 == 0 {
		t.Errorf("negative scales: summed qerr %.6g (positive-only %.6g), %d negative groups, %d of them using code -8", sumNeg, sumPos, negGroups, negMinus8)
	}
	t.Logf("summed qerr %.6g -> %.6g; %d negative-scale groups, %d use code -8", sumPos, sumNeg, negGroups, negMinus8)
}

// TestScaleSearchGPTQIsotropic: with H = c·I the factor U of H⁻¹ is diagonal and constant, GPTQ's
// loss over a group is its unweighted squared error over c, so the GPTQ-loss search picks exactly the
// weighted search's scales (and GPTQ equals RTN), with and without negative scales.
func TestScaleSearchGPTQIsotropic(t *testing.T) {
	ctx := context.Background()
	const k = 96
	w := randMatrix("w", 12, k, 43)
	h := NewHessian(k)
	for i := 0; i < k; i++ {
		h.Data[i*k+i] = 3
	}
	for _, neg := range []bool{false, true} {
		r, err := RTN(ctx, w, h, WithGroup(32), WithNegativeScales(neg))
		if err != nil {
			t.Fatal(err)
		}
		q, err := GPTQ(ctx, w, h, WithGroup(32), WithNegativeScales(neg), WithScaleSearch(ScaleSearchGPTQ))
		if err != nil {
			t.Fatal(err)
		}
		for i := range r.Codes {
			if r.Codes[i] != q.Codes[i] {
				t.Fatalf("negative %v: code %d: GPTQ %d, RTN %d", neg, i, q.Codes[i], r.Codes[i])
			}
		}
		for i := range r.Scales {
			if r.Scales[i] != q.Scales[i] {
				t.Fatalf("negative %v: scale %d: GPTQ %v, RTN %v", neg, i, q.Scales[i], r.Scales[i])
			}
		}
	}
}

// chooseScaleGPTQRef is the GPTQ-loss search written plainly (math.Round, no early exit): the oracle
// of chooseScaleGPTQ.
func chooseScaleGPTQRef(x, U []float64, kp, c0, bits int, grid []float64) float32 {
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
		y := append([]float64(nil), x...)
		e := 0.0
		for a := range y {
			q := math.Max(math.Min(math.Round(y[a]*(1/s64)), float64(hi)), float64(lo))
			r := float64(y[a]-float64(q*s64)) / U[(c0+a)*kp+c0+a]
			e += float64(r * r)
			for b := a + 1; b < len(y); b++ {
				y[b] -= float64(r * U[(c0+a)*kp+c0+b])
			}
		}
		if e < bestErr {
			best, bestErr = s, e
		}
	}
	return best
}

func TestChooseScaleGPTQMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	const kp = 96
	signed := append(append([]float64(nil), DefaultClipGrid...), DefaultClipGrid...) // scale_sign search's grid
	for j := len(DefaultClipGrid); j < len(signed); j++ {
		signed[j] = -signed[j]
	}
	for i := 0; i < 3000; i++ {
		U := make([]float64, kp*kp)
		for a := 0; a < kp; a++ {
			U[a*kp+a] = 0.1 + rng.ExpFloat64()
			for b := a + 1; b < kp; b++ {
				U[a*kp+b] = rng.NormFloat64() * 0.3
			}
		}
		n := []int{32, 5, 64, 1}[i%4]
		c0 := rng.IntN(kp - n + 1)
		x := clipCase(rng, n)
		grid := [][]float64{DefaultClipGrid, {1, -1}, {1, 0.875, -1, -0.875, 0.5, -0.5}, signed,
			{1, 0, 0.95, 0.9, 0.85, -1, 0.8, 0.75, 0.7, -0.9, 0.65}}[i%5]
		bits := []int{4, 8}[i%2]
		want := chooseScaleGPTQRef(x, U, kp, c0, bits, grid)
		got := chooseScaleGPTQ(x, U, kp, c0, bits, grid, make([]float64, n)) // the scalar loop
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("case %d (n %d, c0 %d, bits %d, grid %v): scale %v, reference %v", i, n, c0, bits, grid, got, want)
		}
		for _, path := range gptqScalesPaths() { // the candidates eight at a time
			got := withGPTQScales(path, func() float32 { return chooseScaleGPTQ(x, U, kp, c0, bits, grid, make([]float64, 8*n)) })
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("case %d (n %d, c0 %d, bits %d, grid %v): kernel %d's scale %v, reference %v", i, n, c0, bits, grid, path, got, want)
			}
		}
	}
}

// TestScaleSearchGPTQLowersHessianError: on stories260K's weights with a correlated Hessian, scoring
// scales by GPTQ's loss lowers the summed tr((W-Q)H(W-Q)ᵀ) against the diag(H)-weighted search,
// rotated, with and without negative scales.
func TestScaleSearchGPTQLowersHessianError(t *testing.T) {
	ws := loadMatmulWeights(t, testfiles.Path(t, "stories260K.gguf"), regexp.MustCompile(`.`))
	ctx := context.Background()
	hs := map[int]*Hessian{}
	for _, neg := range []bool{false, true} {
		var sumW, sumG float64
		for _, w := range ws {
			h := correlatedHessian(t, hs, w.Cols)
			opts := []Option{WithWorkers(2), WithGroup(32), WithRotation(true, 3), WithNegativeScales(neg)}
			a, err := GPTQ(ctx, w, h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			b, err := GPTQ(ctx, w, h, append(opts, WithScaleSearch(ScaleSearchGPTQ))...)
			if err != nil {
				t.Fatal(err)
			}
			ea, err := HessianError(w, a, h)
			if err != nil {
				t.Fatal(err)
			}
			eb, err := HessianError(w, b, h)
			if err != nil {
				t.Fatal(err)
			}
			sumW += ea
			sumG += eb
		}
		if !(sumG < sumW) {
			t.Errorf("negative %v: summed tr(EHEᵀ) with the GPTQ-loss search %.6g, not below the weighted search's %.6g", neg, sumG, sumW)
		}
		t.Logf("negative %v: summed tr(EHEᵀ) weighted %.6g, gptq-loss %.6g (%.2f%% lower)", neg, sumW, sumG, 100*(1-sumG/sumW))
	}
}

func TestScaleSearchErrors(t *testing.T) {
	ctx := context.Background()
	w := randMatrix("w", 4, 64, 1)
	h := NewHessian(64)
	for i := 0; i < 64; i++ {
		h.Data[i*64+i] = 1
	}
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"gptq search per channel", func() error {
			_, err := GPTQ(ctx, w, h, WithGroup(0), WithScaleSearch(ScaleSearchGPTQ))
			return err
		}},
		{"gptq search act-order", func() error {
			_, err := GPTQ(ctx, w, h, WithActOrder(true), WithStaticGroups(true), WithScaleSearch(ScaleSearchGPTQ))
			return err
		}},
		{"gptq search static groups", func() error {
			_, err := GPTQ(ctx, w, h, WithStaticGroups(true), WithScaleSearch(ScaleSearchGPTQ))
			return err
		}},
		{"gptq search in RTN", func() error {
			_, err := RTN(ctx, w, h, WithScaleSearch(ScaleSearchGPTQ))
			return err
		}},
		{"unknown search", func() error {
			_, err := RTN(ctx, w, h, WithScaleSearch(ScaleSearch(7)))
			return err
		}},
	} {
		if err := tc.run(); !errors.Is(err, ErrParam) {
			t.Errorf("%s: err %v, want ErrParam", tc.name, err)
		}
	}
}

// TestSignedFactorsMatchReference: every group search path (the Go loop, the AVX2 and AVX-512 kernels,
// chosen by the grid's length and the CPU) takes the signed factors WithNegativeScales makes: the scale
// RTN's quantizeGroup picks is chooseScaleRef's, for signed grids of 2, 8 and 16 factors.
func TestSignedFactorsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 37))
	t.Logf("AVX2 clip kernel %v, AVX-512 group search %v", clipKernel, search512)
	for _, pos := range [][]float64{{1}, {1, 0.9375, 0.875, 0.8125}, DefaultClipGrid} {
		c, err := newConfig([]Option{WithNegativeScales(true), WithClipGrid(pos)})
		if err != nil {
			t.Fatal(err)
		}
		grid := c.scaleFactors()
		if len(grid) != 2*len(pos) {
			t.Fatalf("scale factors %v from grid %v", grid, pos)
		}
		cs := newClipScratch(len(grid))
		for i := 0; i < 4000; i++ {
			n := []int{32, 12, 64, 1}[i%4]
			x := clipCase(rng, n)
			var wd []float64
			if i%2 == 0 {
				wd = make([]float64, n)
				for k := range wd {
					wd[k] = rng.ExpFloat64()
				}
			}
			want := chooseScaleRef(x, wd, 4, grid)
			codes := make([]int8, n)
			got, _, _ := quantizeGroup(codes, x, wd, 4, grid, cs)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("grid %v case %d: scale %v, reference %v (x %v)", grid, i, got, want, x)
			}
		}
	}
}

// gptqScalesPaths are the eight-candidate kernels this CPU runs (gptqScales8's values).
func gptqScalesPaths() []int {
	var p []int
	if kernel.Available {
		p = append(p, gptqScalesAVX2)
	}
	if kernel.Available512 {
		p = append(p, gptqScalesAVX512)
	}
	return p
}

// withGPTQScales returns f's result with chooseScaleGPTQ's kernel set to path.
func withGPTQScales(path int, f func() float32) float32 {
	defer func(old int) { gptqScales8 = old }(gptqScales8)
	gptqScales8 = path
	return f()
}

// FuzzChooseScaleGPTQ: for a group drawn from the fuzzed seeds (clipCase's values: ties, zeros, signed
// zeros, tiny and huge magnitudes; U with a positive diagonal), the scalar loop and each
// eight-candidate kernel the CPU has (kernel.GPTQScales8, kernel.GPTQScales8AVX2) choose the
// reference's scale bit for bit, with the signed grid.
func FuzzChooseScaleGPTQ(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(32), uint8(0))
	f.Add(uint64(7), uint64(9), uint8(1), uint8(1))
	f.Add(uint64(3), uint64(5), uint8(64), uint8(2))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, n8, g uint8) {
		rng := rand.New(rand.NewPCG(s1, s2))
		n := 1 + int(n8)%96
		const kp = 96
		U := make([]float64, kp*kp)
		for a := 0; a < kp; a++ {
			U[a*kp+a] = 0.05 + rng.ExpFloat64()
			for b := a + 1; b < kp; b++ {
				U[a*kp+b] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(5)-3))
			}
		}
		c0 := rng.IntN(kp - n + 1)
		x := clipCase(rng, n)
		grid := append([]float64(nil), DefaultClipGrid...)
		if g%2 == 1 {
			for _, v := range DefaultClipGrid {
				grid = append(grid, -v)
			}
		}
		bits := []int{4, 8}[int(g/2)%2]
		want := chooseScaleGPTQRef(x, U, kp, c0, bits, grid)
		if got := chooseScaleGPTQ(x, U, kp, c0, bits, grid, make([]float64, n)); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("n %d c0 %d bits %d grid %v, the scalar loop: scale %v, reference %v", n, c0, bits, grid, got, want)
		}
		for _, path := range gptqScalesPaths() {
			got := withGPTQScales(path, func() float32 { return chooseScaleGPTQ(x, U, kp, c0, bits, grid, make([]float64, 8*n)) })
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("n %d c0 %d bits %d grid %v, kernel %d: scale %v, reference %v", n, c0, bits, grid, path, got, want)
			}
		}
	})
}
