package quant

import (
	"context"
	"errors"
	"math"
	"testing"
)

// TestGPTQQuantizedInputsLowerHeldOutError: for a weight with outlier channels and inputs with outlier
// channels (10x), GPTQ that sees the inputs' quantization (fitted on 8192 rows, the clip chosen on them)
// is measured by the board matmul's output error against the float product on 2048 held-out rows of the
// same distribution. Unrotated W4A4, where clipping the outliers makes the input error depend on the
// inputs, the asymmetric target (‖W·X − Q·X̃‖) must beat both plain GPTQ (float inputs, the same clip)
// and the quantized-input Hessian alone; rotated (the outliers spread, the error close to independent
// noise) and with 8-bit inputs it must stay within 1% of plain GPTQ.
func TestGPTQQuantizedInputsLowerHeldOutError(t *testing.T) {
	ctx := context.Background()
	const n, k = 64, 64
	f, err := SyntheticWeight("w", n, k, 7)
	if err != nil {
		t.Fatal(err)
	}
	// one distribution (the outlier channels are the seed's): calibration rows and held-out rows of it
	all, err := SpikedActivations(8192+2048, k, 1)
	if err != nil {
		t.Fatal(err)
	}
	calibX := Matrix{Name: "calib", Rows: 8192, Cols: k, Data: all.Data[:8192*k]}
	held := Matrix{Name: "held", Rows: 2048, Cols: k, Data: all.Data[8192*k:]}
	h := NewHessian(k)
	if err := h.Add(calibX.Data, calibX.Rows); err != nil {
		t.Fatal(err)
	}
	ref := matmulF64(held.Data, held.Rows, f.Data, f.Rows, f.Cols)
	var refSS float64
	for _, v := range ref {
		refSS += v * v
	}
	for _, tc := range []struct {
		name   string
		abits  int
		rotate bool
	}{
		{"W4A4", 4, false},
		{"W4A4 rotated", 4, true},
		{"W4A8 rotated", 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := []Option{WithBits(4), WithGroup(32), WithWorkers(2)}
			if tc.rotate {
				base = append(base, WithRotation(true, 99))
			}
			rel := map[InputTarget]float64{}
			var clip float64
			for _, target := range []InputTarget{InputsAsymmetric, InputsQuantized, InputsFloat} {
				opts := append(append([]Option(nil), base...), WithQuantizedInputs(target, calibX.Data, calibX.Rows, tc.abits, DefaultActClipGrid))
				w, err := GPTQ(ctx, f, h, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if target == InputsAsymmetric {
					clip = w.InputClip // plain GPTQ is measured at the clip the quantized-input runs chose
					if !(clip > 0 && clip <= 1) {
						t.Fatalf("input clip %v: want a ratio in (0, 1]", clip)
					}
				} else if target == InputsFloat && w.InputClip != 0 {
					t.Fatalf("float inputs report input clip %v, want 0", w.InputClip)
				}
				rel[target] = math.Sqrt(heldOutErr(t, w, f, held, tc.abits, clip) / refSS)
			}
			t.Logf("clip %.3f; held-out relative output error: float %.5f, quantized %.5f, asymmetric %.5f",
				clip, rel[InputsFloat], rel[InputsQuantized], rel[InputsAsymmetric])
			if !tc.rotate && !(rel[InputsAsymmetric] < rel[InputsFloat] && rel[InputsAsymmetric] < rel[InputsQuantized]) {
				t.Fatalf("asymmetric target %g, quantized %g, float %g: want the asymmetric target lowest", rel[InputsAsymmetric], rel[InputsQuantized], rel[InputsFloat])
			}
			if rel[InputsAsymmetric] > rel[InputsFloat]*1.01 {
				t.Fatalf("asymmetric target %g, float %g: want no worse than 1%% above plain GPTQ", rel[InputsAsymmetric], rel[InputsFloat])
			}
		})
	}
}

// TestGPTQAsymmetricTargetIsMinimizer: on the calibration sample itself (the Hessian made of exactly its
// rows), H̃ = X̃ᵀX̃ and W* is the unconstrained minimizer of ‖X̃·qᵀ − X·wᵀ‖ (up to a tiny damping): its
// error is below the float weight's, and no perturbation of it does better.
func TestGPTQAsymmetricTargetIsMinimizer(t *testing.T) {
	ctx := context.Background()
	const n, k = 48, 128
	f, err := SyntheticWeight("w", n, k, 3)
	if err != nil {
		t.Fatal(err)
	}
	x, err := SpikedActivations(512, k, 5)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHessian(k)
	if err := h.Add(x.Data, x.Rows); err != nil {
		t.Fatal(err)
	}
	c, err := newConfig([]Option{WithQuantizedInputs(InputsAsymmetric, x.Data, x.Rows, 4, []float64{0.9})})
	if err != nil {
		t.Fatal(err)
	}
	w := &Weight{N: n, K: k, KP: k}
	st, err := c.inputs.prepare(ctx, "w", w, f.Data, h.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	H := append([]float64(nil), h.Data...)
	st.correctHessian(H, k)
	for i := range k { // H̃ = X̃ᵀX̃ exactly (scale 1)
		for j := range k {
			var s float64
			for r := 0; r < x.Rows; r++ {
				s += st.xq[r*k+i] * st.xq[r*k+j]
			}
			if d := math.Abs(H[i*k+j] - s); d > 1e-9*math.Max(1, math.Abs(s)) {
				t.Fatalf("H̃[%d][%d] = %g, X̃ᵀX̃ = %g", i, j, H[i*k+j], s)
			}
		}
	}
	xq := make([]float32, len(st.xq))
	for i, v := range st.xq {
		xq[i] = float32(v)
	}
	U := append([]float64(nil), H...)
	if _, err := inverseCholeskyUpper(ctx, U, k, &config{percDamp: 1e-6, dampStep: 0.01, dampTries: 4}, nil); err != nil {
		t.Fatal(err)
	}
	wstar, err := st.asymmetricTarget(ctx, f.Data, n, k, U)
	if err != nil {
		t.Fatal(err)
	}
	ref := matmulF64(x.Data, x.Rows, f.Data, n, k)
	errOf := func(wd []float32) float64 {
		y := matmulF64(xq, x.Rows, wd, n, k)
		var e float64
		for i, v := range y {
			d := v - ref[i]
			e += d * d
		}
		return e
	}
	eW, eStar := errOf(f.Data), errOf(wstar)
	t.Logf("‖X̃·wᵀ − X·wᵀ‖² %g, at W* %g", eW, eStar)
	if !(eStar < eW) {
		t.Fatalf("W* error %g, W error %g: the target should lower the error of the quantized inputs", eStar, eW)
	}
	// W* is stationary: a small step along any direction does not lower the error (checked on random ones).
	g := newRNG(11)
	for try := 0; try < 4; try++ {
		p := append([]float32(nil), wstar...)
		for i := range p {
			p[i] += float32(1e-3 * g.norm())
		}
		if e := errOf(p); e < eStar*(1-1e-6) {
			t.Fatalf("perturbed W* has error %g < %g: W* is not the minimizer", e, eStar)
		}
	}
}

func TestWithQuantizedInputsRefuses(t *testing.T) {
	x := make([]float32, 64)
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"target", WithQuantizedInputs(InputTarget(7), x, 1, 4, []float64{1})},
		{"bits", WithQuantizedInputs(InputsQuantized, x, 1, 6, []float64{1})},
		{"rows", WithQuantizedInputs(InputsQuantized, x, 3, 4, []float64{1})},
		{"grid", WithQuantizedInputs(InputsQuantized, x, 1, 4, nil)},
		{"clip", WithQuantizedInputs(InputsQuantized, x, 1, 4, []float64{1.5})},
	} {
		if _, err := newConfig([]Option{tc.opt}); !errors.Is(err, ErrParam) && !errors.Is(err, ErrShape) {
			t.Errorf("%s: err %v, want ErrParam or ErrShape", tc.name, err)
		}
	}
	f, _ := SyntheticWeight("w", 8, 64, 1)
	h := NewHessian(64)
	if err := h.Add(x, 1); err != nil {
		t.Fatal(err)
	}
	_, err := GPTQ(context.Background(), f, h, WithQuantizedInputs(InputsQuantized, make([]float32, 32), 1, 4, []float64{1}))
	if !errors.Is(err, ErrShape) {
		t.Errorf("sample of K = 32 for K = 64: err %v, want ErrShape", err)
	}
	_, err = GPTQ(context.Background(), f, h, WithActOrder(true), WithGroup(0), WithQuantizedInputs(InputsQuantized, x, 1, 4, []float64{1}))
	if !errors.Is(err, ErrParam) {
		t.Errorf("act-order: err %v, want ErrParam", err)
	}
}
