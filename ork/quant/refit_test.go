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

// refitFixture returns an SPD H (k x k, correlated), U with UᵀU = H⁻¹ (upper, row-major) and a
// weight of n rows with random codes and scales in groups of g.
func refitFixture(t *testing.T, n, k, g int, seed uint64) (*mat.SymDense, []float64, *Weight, []float32) {
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
	U := make([]float64, k*k)
	for i := 0; i < k; i++ {
		for j := i; j < k; j++ {
			U[i*k+j] = u.At(i, j)
		}
	}
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
	return h, U, w, target
}

// TestRefitScalesSolvesNormalEquations: the refitted scales of every row of at most DefaultRefitSteps groups
// solve AᵀH·A·s = AᵀH·w (A the row's codes, one column per group) as a dense solve does; a row of more
// groups gets at least 99% of the decrease of its error the dense solve gets; hProduct equals x·H; a
// group whose codes are all zero keeps its scale.
func TestRefitScalesSolvesNormalEquations(t *testing.T) {
	for _, tc := range []struct{ n, k, g int }{{5, 64, 32}, {40, 96, 32}, {3, 128, 32}, {4, 64, 0}, {7, 256, 64}, {6, 512, 32}, {3, 640, 32}} {
		h, U, w, target := refitFixture(t, tc.n, tc.k, tc.g, uint64(tc.k+tc.n))
		k, ng, g := tc.k, w.Groups(), effGroup(tc.k, tc.g)
		// hProduct against the explicit product
		x := make([]float64, k)
		for i := range x {
			x[i] = math.Sin(float64(i))
		}
		hx := make([]float64, k)
		hProduct(U, k, x, hx, 1)
		for j := 0; j < k; j++ {
			want := 0.0
			for i := 0; i < k; i++ {
				want += x[i] * h.At(i, j)
			}
			if math.Abs(hx[j]-want) > 1e-8*(1+math.Abs(want)) {
				t.Fatalf("k %d: (x·H)[%d] = %g, want %g", k, j, hx[j], want)
			}
		}
		clear(w.Codes[:g]) // row 0's first group: all-zero codes
		keep := w.Scales[0]
		init := append([]float32(nil), w.Scales...)
		diag := make([]float64, k)
		for i := range diag {
			diag[i] = h.At(i, i)
		}
		refitScales(w, target, U, diag, 0, tc.n, make([]bool, k), DefaultRefitSteps)
		if w.Scales[0] != keep {
			t.Fatalf("all-zero group's scale %v changed to %v", keep, w.Scales[0])
		}
		for r := 0; r < tc.n; r++ {
			a := mat.NewDense(k, ng, nil)
			for j := 0; j < k; j++ {
				a.Set(j, j/g, float64(w.Codes[r*k+j]))
			}
			var ha, m mat.Dense
			ha.Mul(h, a)
			m.Mul(a.T(), &ha)
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
		h, U, w, target := refitFixture(t, n, k, g, 7)
		diag := make([]float64, k)
		for i := range diag {
			diag[i] = h.At(i, i)
		}
		refitScales(w, target, U, diag, 0, n, make([]bool, k), steps)
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
