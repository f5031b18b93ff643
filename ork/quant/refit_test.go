package quant

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"

	"orkpipe/internal/testfiles"

	"gonum.org/v1/gonum/mat"
)

// refitFixture returns an SPD H (k x k, correlated), the buffer GPTQ leaves for the refit (U with
// UᵀU = H⁻¹ on and above the diagonal, row-major, H below it and its diagonal beside it) and a
// weight of n rows with random codes and scales in groups of g.
func refitFixture(t *testing.T, n, k, g int, seed uint64) (*mat.SymDense, hessBuffer, *Weight, []float32) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	x := mat.NewDense(4*k, k, nil)
	for i := 0; i < 4*k; i++ {
		base := rng.NormFloat64()
		for j := 0; j < k; j++ {
			x.Set(i, j, 0.7*base+rng.NormFloat64()*(1+float64(j%5)))
		}
	}
	h := mat.NewSymDense(k, nil)
	h.SymOuterK(1, x.T())
	var ch mat.Cholesky
	if !ch.Factorize(h) {
		t.Fatal("H not positive definite")
	}
	var hinv mat.SymDense
	if err := ch.InverseTo(&hinv); err != nil {
		t.Fatal(err)
	}
	var ci mat.Cholesky
	if !ci.Factorize(&hinv) {
		t.Fatal("H⁻¹ not positive definite")
	}
	var u mat.TriDense
	ci.UTo(&u) // H⁻¹ = UᵀU
	hb := hessBuffer{a: make([]float64, k*k), diag: make([]float64, k), kp: k}
	for i := 0; i < k; i++ {
		for j := 0; j < k; j++ {
			if j >= i {
				hb.a[i*k+j] = u.At(i, j)
			} else {
				hb.a[i*k+j] = h.At(i, j)
			}
		}
		hb.diag[i] = h.At(i, i)
	}
	w, target := randomCodedWeight(rng, n, k, g)
	return h, hb, w, target
}

// randomCodedWeight returns a weight of n x k random int4 codes in groups of g with random scales,
// and a random target of the same shape.
func randomCodedWeight(rng *rand.Rand, n, k, g int) (*Weight, []float32) {
	w := &Weight{N: n, K: k, KP: k, Bits: 4, Group: g, Codes: make([]int8, n*k)}
	w.Scales = make([]float32, n*w.Groups())
	target := make([]float32, n*k)
	for i := range w.Codes {
		w.Codes[i] = int8(rng.IntN(16) - 8)
		target[i] = float32(rng.NormFloat64())
	}
	for i := range w.Scales {
		w.Scales[i] = float32(0.05 + 0.1*rng.Float64())
	}
	return w, target
}

// denseGram returns a row's Gram matrix AᵀHA and H·A, computed densely: A is the K x ng matrix of the
// row's codes, one column per group of g.
func denseGram(h *mat.SymDense, codes []int8, ng, g int) (m, ha *mat.Dense) {
	a := mat.NewDense(len(codes), ng, nil)
	for j, c := range codes {
		a.Set(j, j/g, float64(c))
	}
	m, ha = new(mat.Dense), new(mat.Dense)
	ha.Mul(h, a)
	m.Mul(a.T(), ha)
	return m, ha
}

// TestGramProducts: gramProducts' AᵀHA equal the explicit products, for groups that divide K and a
// last group shorter than the others, on each of gramTile's paths.
func TestGramProducts(t *testing.T) {
	for _, tc := range []struct{ n, k, g int }{{3, 64, 32}, {refitBlock, 96, 32}, {5, 100, 32}, {2, 64, 0}, {17, 72, 8}} {
		for _, path := range gramPaths() {
			testGramProducts(t, tc.n, tc.k, tc.g, path)
		}
	}
}

func testGramProducts(t *testing.T, n, k, group int, path string) {
	t.Helper()
	h, hb, w, _ := refitFixture(t, n, k, group, uint64(k))
	ng, g := w.Groups(), effGroup(k, group)
	sc := newRefitScratch(k, ng, g, refitBlock)
	for r := 0; r < n; r++ {
		for j := 0; j < k; j++ {
			sc.c[j*sc.cs+r] = float64(w.Codes[r*k+j])
		}
	}
	withGramPath(path, func() { gramProducts(hb, sc, n, ng, g) })
	for r := 0; r < n; r++ {
		m, _ := denseGram(h, w.Codes[r*k:(r+1)*k], ng, g)
		for gi := 0; gi < ng; gi++ {
			for gj := 0; gj < ng; gj++ {
				i, j := min(gi, gj), max(gi, gj)
				got, want := sc.gram[r*symPacked(ng)+j*(j+1)/2+i], m.At(gi, gj)
				if math.Abs(got-want) > 1e-9*(1+math.Abs(want)) {
					t.Fatalf("k %d g %d, %s: row %d: Gram (%d,%d) = %g, want %g", k, g, path, r, gi, gj, got, want)
				}
			}
		}
	}
}

// TestTargetTimesH: targetTimesH's t·H and tᵀHt equal the explicit products with the dead columns'
// values as zero, for row counts around targetBlock and one or two workers.
func TestTargetTimesH(t *testing.T) {
	for _, tc := range []struct{ n, k, workers int }{{3, 64, 1}, {targetBlock + 5, 96, 2}, {2*targetBlock + 1, 100, 1}, {40, 64, 2}} {
		h, hb, _, target := refitFixture(t, tc.n, tc.k, 32, uint64(tc.k+tc.n))
		k := tc.k
		dead := make([]bool, k)
		dead[1], dead[k-1] = true, true
		tp, err := targetTimesH(context.Background(), target, hb, dead, tc.n, tc.workers)
		if err != nil {
			t.Fatal(err)
		}
		for r := 0; r < tc.n; r++ {
			tv := make([]float64, k)
			for j := range tv {
				if !dead[j] {
					tv[j] = float64(target[r*k+j])
				}
			}
			wantT := 0.0
			for j := 0; j < k; j++ {
				want := 0.0
				for i := 0; i < k; i++ {
					want += tv[i] * h.At(i, j)
				}
				wantT += tv[j] * want
				if got := tp.th[r*k+j]; math.Abs(got-want) > 1e-9*(1+math.Abs(want)) {
					t.Fatalf("n %d k %d: row %d: (t·H)[%d] = %g, want %g", tc.n, k, r, j, got, want)
				}
			}
			if got := tp.tht[r]; math.Abs(got-wantT) > 1e-9*(1+math.Abs(wantT)) {
				t.Fatalf("n %d k %d: row %d: tᵀHt = %g, want %g", tc.n, k, r, got, wantT)
			}
		}
	}
	_, hb, _, target := refitFixture(t, 4, 64, 32, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := targetTimesH(ctx, target, hb, make([]bool, 64), 4, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v, want context.Canceled", err)
	}
}

// refitRows runs refitScales on rows [0, n) of w as the refit does: the target's products with H
// first, then blocks of refitBlockRows.
func refitRows(t testing.TB, w *Weight, target []float32, hb hessBuffer, steps int, errs []float64) {
	t.Helper()
	refitRowsIn(t, w, target, hb, steps, errs, refitBlockRows(w.Groups()))
}

func refitRowsIn(t testing.TB, w *Weight, target []float32, hb hessBuffer, steps int, errs []float64, nb int) {
	t.Helper()
	tp, err := targetTimesH(context.Background(), target, hb, make([]bool, w.KP), w.N, 1)
	if err != nil {
		t.Fatal(err)
	}
	refitScales(w, tp, hb, hb.diag, 0, w.N, steps, errs, newRefitScratch(w.KP, w.Groups(), effGroup(w.KP, w.Group), nb))
}

// TestRefitBlockRows: a row's refitted scales and error are the same bits whatever block it is
// refitted in (blocks of 1, 5, 32 and 64 rows; the last block short), and refitBlockRows halves
// the block only where a block's Gram matrices would pass refitGramBytes.
func TestRefitBlockRows(t *testing.T) {
	const n, k, g = 70, 256, 32
	_, hb, w0, target := refitFixture(t, n, k, g, 11)
	var wantScales []float32
	var wantErrs []float64
	for _, nb := range []int{refitBlock, 32, 5, 1} {
		w := *w0
		w.Scales = append([]float32(nil), w0.Scales...)
		errs := make([]float64, n)
		refitRowsIn(t, &w, target, hb, DefaultRefitSteps, errs, nb)
		if wantScales == nil {
			wantScales, wantErrs = w.Scales, errs
			continue
		}
		if !slices.Equal(w.Scales, wantScales) || !slices.Equal(errs, wantErrs) {
			t.Fatalf("blocks of %d rows: other scales or errors than blocks of %d", nb, refitBlock)
		}
	}
	for _, tc := range []struct{ ng, want int }{{8, refitBlock}, {544, refitBlock}, {626, refitBlock}, {627, refitBlock / 2}, {2048, refitBlock / 2}} {
		if got := refitBlockRows(tc.ng); got != tc.want {
			t.Errorf("refitBlockRows(%d) = %d, want %d", tc.ng, got, tc.want)
		}
	}
}

// TestRefitScalesSolvesNormalEquations: the refitted scales of every row of at most DefaultRefitSteps groups
// solve AᵀH·A·s = AᵀH·w (A the row's codes, one column per group) as a dense solve does; a row of more
// groups gets at least 99% of the decrease of its error the dense solve gets; the error refitScales
// reports is the row's (t−q)ᵀH(t−q) with its stored scales; a group whose codes are all zero keeps
// its scale.
func TestRefitScalesSolvesNormalEquations(t *testing.T) {
	for _, tc := range []struct{ n, k, g int }{{5, 64, 32}, {40, 96, 32}, {3, 128, 32}, {4, 64, 0}, {7, 256, 64}, {6, 512, 32}, {3, 640, 32}, {4, 100, 32}} {
		h, hb, w, target := refitFixture(t, tc.n, tc.k, tc.g, uint64(tc.k+tc.n))
		k, ng, g := tc.k, w.Groups(), effGroup(tc.k, tc.g)
		clear(w.Codes[:g]) // row 0's first group: all-zero codes
		keep := w.Scales[0]
		init := append([]float32(nil), w.Scales...)
		errs := make([]float64, tc.n)
		refitRows(t, w, target, hb, DefaultRefitSteps, errs)
		if w.Scales[0] != keep {
			t.Fatalf("all-zero group's scale %v changed to %v", keep, w.Scales[0])
		}
		for r := 0; r < tc.n; r++ {
			d := mat.NewVecDense(k, nil)
			for j := 0; j < k; j++ {
				d.SetVec(j, float64(target[r*k+j])-float64(w.Scales[r*ng+j/g])*float64(w.Codes[r*k+j]))
			}
			want := mat.Inner(d, h, d)
			if math.Abs(errs[r]-want) > 1e-9*want {
				t.Fatalf("n %d k %d g %d: row %d: reported error %.12g, (t−q)ᵀH(t−q) = %.12g", tc.n, tc.k, tc.g, r, errs[r], want)
			}
		}
		for r := 0; r < tc.n; r++ {
			m, ha := denseGram(h, w.Codes[r*k:(r+1)*k], ng, g)
			tv := make([]float64, k)
			for j := range tv {
				tv[j] = float64(target[r*k+j])
			}
			var b mat.VecDense
			b.MulVec(ha.T(), mat.NewVecDense(k, tv))
			free := []int{}
			for gi := 0; gi < ng; gi++ {
				if m.At(gi, gi) > 0 {
					free = append(free, gi)
				}
			}
			if len(free) == 0 {
				continue
			}
			ms := mat.NewDense(len(free), len(free), nil)
			bs := mat.NewVecDense(len(free), nil)
			for i, gi := range free {
				bs.SetVec(i, b.AtVec(gi))
				for j, gj := range free {
					ms.Set(i, j, m.At(gi, gj))
				}
			}
			var s mat.VecDense
			if err := s.SolveVec(ms, bs); err != nil {
				t.Fatal(err)
			}
			if len(free) > DefaultRefitSteps {
				// error up to a constant: sᵀMs − 2bᵀs over the free groups
				f := func(sc func(gi int) float64) float64 {
					v := 0.0
					for _, gi := range free {
						v -= 2 * b.AtVec(gi) * sc(gi)
						for _, gj := range free {
							v += sc(gi) * m.At(gi, gj) * sc(gj)
						}
					}
					return v
				}
				opt := make(map[int]float64)
				for i, gi := range free {
					opt[gi] = s.AtVec(i)
				}
				fInit := f(func(gi int) float64 { return float64(init[r*ng+gi]) })
				fGot := f(func(gi int) float64 { return float64(w.Scales[r*ng+gi]) })
				fOpt := f(func(gi int) float64 { return opt[gi] })
				if !(fGot <= fInit) || fGot-fOpt > 0.01*(fInit-fOpt) {
					t.Fatalf("n %d k %d g %d: row %d (%d groups): error %.9g from %.9g, the dense solve's %.9g: want at least 99%% of the decrease",
						tc.n, tc.k, tc.g, r, len(free), fGot, fInit, fOpt)
				}
				continue
			}
			for i, gi := range free {
				got, want := float64(w.Scales[r*ng+gi]), s.AtVec(i)
				if math.Abs(got-want) > 1e-5*(math.Abs(want)+1e-3) {
					t.Fatalf("n %d k %d g %d: row %d group %d: refit scale %.9g, dense solve %.9g", tc.n, tc.k, tc.g, r, gi, got, want)
				}
			}
		}
	}
}

// TestGPTQScaleRefitLowersError: on stories260K's weights with a correlated Hessian, the refit (and two
// rounds) never raises a weight's calibrated error tr((W−Q)H(W−Q)ᵀ) beyond the damping's share and
// lowers the sum; the codes of one round are GPTQ's own.
func TestGPTQScaleRefitLowersError(t *testing.T) {
	ws := loadMatmulWeights(t, testfiles.Path(t, "stories260K.gguf"), regexp.MustCompile(`blk\.[01]\.`))
	ctx := context.Background()
	hs := map[int]*Hessian{}
	for _, cfg := range []struct {
		name string
		opts []Option
	}{
		{"g32 rotated gptq-scales", []Option{WithGroup(32), WithRotation(true, 3), WithScaleSearch(ScaleSearchGPTQ), WithNegativeScales(true)}},
		{"g32", []Option{WithGroup(32)}},
		{"per channel", []Option{WithGroup(0)}},
	} {
		var sum0, sum1, sum2 float64
		for _, w := range ws {
			h := correlatedHessian(t, hs, w.Cols)
			opts := append([]Option{WithWorkers(2), WithDamping(1e-6, 0.01, 8)}, cfg.opts...)
			var errs [3]float64
			var q0 *Weight
			for rounds := 0; rounds <= 2; rounds++ {
				steps := 0
				if rounds > 0 {
					steps = DefaultRefitSteps
				}
				q, err := GPTQ(ctx, w, h, append(opts, WithScaleRefit(rounds, steps))...)
				if err != nil {
					t.Fatal(err)
				}
				if err := q.Validate(); err != nil {
					t.Fatal(err)
				}
				if errs[rounds], err = HessianError(w, q, h); err != nil {
					t.Fatal(err)
				}
				if rounds == 0 {
					q0 = q
				} else if rounds == 1 {
					for i := range q.Codes {
						if q.Codes[i] != q0.Codes[i] {
							t.Fatalf("%s: one round changed code %d", w.Name, i)
						}
					}
				}
			}
			if errs[1] > errs[0]*(1+1e-6) || errs[2] > errs[1]*(1+1e-6) {
				t.Errorf("%s %s: error GPTQ %.6g, refit %.6g, 2 rounds %.6g: want non-increasing", cfg.name, w.Name, errs[0], errs[1], errs[2])
			}
			sum0, sum1, sum2 = sum0+errs[0], sum1+errs[1], sum2+errs[2]
		}
		t.Logf("%-24s Σ tr((W-Q)H(W-Q)ᵀ): GPTQ %.6g, refit %.6g (%.2f%%), 2 rounds %.6g (%.2f%%)", cfg.name, sum0, sum1, 100*(sum1/sum0-1), sum2, 100*(sum2/sum0-1))
		if !(sum1 < sum0) {
			t.Errorf("%s: refit did not lower the summed error", cfg.name)
		}
	}
}

func TestWithScaleRefitRefuses(t *testing.T) {
	for _, opts := range [][]Option{
		{WithScaleRefit(-1, DefaultRefitSteps)},
		{WithScaleRefit(MaxScaleRefit+1, DefaultRefitSteps)},
		{WithScaleRefit(1, 0)},
		{WithScaleRefit(1, MaxRefitSteps+1)},
		{WithScaleRefit(0, DefaultRefitSteps)},
		{WithScaleRefit(1, DefaultRefitSteps), WithActOrder(true), WithStaticGroups(true)},
	} {
		if _, err := newConfig(opts); !errors.Is(err, ErrParam) {
			t.Errorf("%d options: %v, want ErrParam", len(opts), err)
		}
	}
}

// TestRefitStepsChangeScales: the conjugate-gradient steps change the refitted scales of a row of
// more groups than steps (so a stage that refits holds them in its key: stages.FinalizeParams
// RefitSteps), and stop mattering once they reach the row's groups (the solve is exact there).
func TestRefitStepsChangeScales(t *testing.T) {
	const n, k, g = 6, 512, 32 // 16 groups a row
	refit := func(steps int) []float32 {
		_, hb, w, target := refitFixture(t, n, k, g, 7)
		refitRows(t, w, target, hb, steps, make([]float64, n))
		return w.Scales
	}
	four, eight := refit(DefaultRefitSteps), refit(2*DefaultRefitSteps)
	if slices.Equal(four, eight) {
		t.Fatalf("%d and %d steps gave the same scales for rows of %d groups", DefaultRefitSteps, 2*DefaultRefitSteps, k/g)
	}
	if !slices.Equal(refit(k/g), refit(MaxRefitSteps)) {
		t.Fatalf("%d and %d steps differ for rows of %d groups: want the same (min(groups, steps) steps)", k/g, MaxRefitSteps, k/g)
	}
}

// BenchmarkRefitScales: one refit of refitBlock·4 rows of a K = 2048 weight in groups of 32 (its Gram
// products, conjugate gradients and errors; the target's products with H taken before), on one
// goroutine. The flops counted are the Gram products' K² a row.
func BenchmarkRefitScales(b *testing.B) {
	const n, k, g = 4 * refitBlock, 2048, 32
	hb, w, target := refitBenchFixture(n, k, g)
	scales := append([]float32(nil), w.Scales...)
	tp, err := targetTimesH(context.Background(), target, hb, make([]bool, k), n, 1)
	if err != nil {
		b.Fatal(err)
	}
	sc, errs := newRefitScratch(k, w.Groups(), g, refitBlock), make([]float64, n)
	b.ResetTimer()
	for range b.N {
		copy(w.Scales, scales)
		refitScales(w, tp, hb, hb.diag, 0, n, DefaultRefitSteps, errs, sc)
	}
	b.ReportMetric(float64(n)*k*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkTargetTimesH: the target's products with H (targetTimesH) for two blocks of targetBlock
// rows of a K = 2048 weight, on one goroutine: 2·K² flops a row.
func BenchmarkTargetTimesH(b *testing.B) {
	const n, k = 2 * targetBlock, 2048
	hb, _, target := refitBenchFixture(n, k, 32)
	dead := make([]bool, k)
	b.ResetTimer()
	for range b.N {
		if _, err := targetTimesH(context.Background(), target, hb, dead, n, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*float64(n)*k*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// refitBenchFixture is a diagonally dominant H's buffer (no factor above the diagonal) and a random
// coded weight of n x k in groups of g with its target.
func refitBenchFixture(n, k, g int) (hessBuffer, *Weight, []float32) {
	rng := rand.New(rand.NewPCG(1, 2))
	hb := hessBuffer{a: make([]float64, k*k), diag: make([]float64, k), kp: k}
	for i := 0; i < k; i++ {
		for j := 0; j < i; j++ {
			hb.a[i*k+j] = 0.01 * rng.NormFloat64()
		}
		hb.diag[i] = float64(k)
	}
	w, target := randomCodedWeight(rng, n, k, g)
	return hb, w, target
}

// BenchmarkRefitScalesWide: one refit of one block of refitBlock rows at the 27B ffn_down's width
// (K = 17408, 544 groups of 32), where a group's products with H's rows pass the L2 cache.
func BenchmarkRefitScalesWide(b *testing.B) {
	const n, k, g = refitBlock, 17408, 32
	hb, w, target := refitBenchFixture(n, k, g)
	scales := append([]float32(nil), w.Scales...)
	tp, err := targetTimesH(context.Background(), target, hb, make([]bool, k), n, 1)
	if err != nil {
		b.Fatal(err)
	}
	sc, errs := newRefitScratch(k, w.Groups(), g, refitBlockRows(w.Groups())), make([]float64, n)
	b.ResetTimer()
	for range b.N {
		copy(w.Scales, scales)
		refitScales(w, tp, hb, hb.diag, 0, n, DefaultRefitSteps, errs, sc)
	}
	b.ReportMetric(float64(n)*k*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
