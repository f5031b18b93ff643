package quant

import (
	"context"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

// TestGPTQBeatsRTNOnStories260K: on every stories260K matmul weight, with a Hessian from a fixed
// synthetic correlated activation set, GPTQ's tr((W-Q)H(W-Q)ᵀ) is below RTN's (same bits,
// groups, clip grid, rotation; RTN's clip search weighted by diag(H) too).
func TestGPTQBeatsRTNOnStories260K(t *testing.T) {
	ws := loadMatmulWeights(t, testfiles.Path(t, "stories260K.gguf"), regexp.MustCompile(`.`))
	ctx := context.Background()
	hs := map[int]*Hessian{}
	for _, cfg := range []struct {
		name string
		opts []Option
	}{
		{"int4 g32", []Option{WithGroup(32)}},
		{"int4 per-channel", []Option{WithGroup(0)}},
		{"int4 g32 rotated", []Option{WithGroup(32), WithRotation(true, 1)}},
		{"int4 g32 act-order static", []Option{WithGroup(32), WithActOrder(true), WithStaticGroups(true)}},
		{"int8 per-channel", []Option{WithBits(8), WithGroup(0)}},
	} {
		sumRed := 0.0
		for _, w := range ws {
			h := correlatedHessian(t, hs, w.Cols)
			opts := append([]Option{WithWorkers(2)}, cfg.opts...)
			rtnOpts := opts
			if cfg.name == "int4 g32 act-order static" { // RTN has no column order
				rtnOpts = []Option{WithWorkers(2), WithGroup(32)}
			}
			r, err := RTN(ctx, w, h, rtnOpts...)
			if err != nil {
				t.Fatal(err)
			}
			g, err := GPTQ(ctx, w, h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Validate(); err != nil {
				t.Fatal(err)
			}
			er, err := HessianError(w, r, h)
			if err != nil {
				t.Fatal(err)
			}
			eg, err := HessianError(w, g, h)
			if err != nil {
				t.Fatal(err)
			}
			if !(eg < er) {
				t.Errorf("%s: %s: GPTQ tr(EHEᵀ) %.6g not below RTN %.6g", cfg.name, w.Name, eg, er)
			}
			sumRed += 1 - eg/er
		}
		t.Logf("%-26s mean reduction of tr((W-Q)H(W-Q)ᵀ) vs RTN over %d weights: %.2f%%", cfg.name, len(ws), 100*sumRed/float64(len(ws)))
	}
}

// correlatedHessian returns the Hessian of a fixed synthetic correlated activation set (1024 rows of k
// values, seed 42), made once per k in hs.
func correlatedHessian(t *testing.T, hs map[int]*Hessian, k int) *Hessian {
	t.Helper()
	if h := hs[k]; h != nil {
		return h
	}
	acts, err := CorrelatedActivations(1024, k, 42)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHessian(k)
	if err := h.Add(acts.Data, acts.Rows); err != nil {
		t.Fatal(err)
	}
	hs[k] = h
	return h
}

func TestGPTQDampingRetry(t *testing.T) {
	ctx := context.Background()
	const k = 64
	w := randMatrix("blk.9.attn_v.weight", 8, k, 3)
	// A rank-deficient Hessian (16 tokens < K) shifted by -1.5% of its mean diagonal: the first
	// damping (1%) leaves it indefinite, the second (2%) makes it positive definite.
	acts := randMatrix("acts", 16, k, 4)
	h := NewHessian(k)
	if err := h.Add(acts.Data, acts.Rows); err != nil {
		t.Fatal(err)
	}
	mean := 0.0
	for _, d := range h.Diag() {
		mean += d
	}
	mean /= k
	for i := 0; i < k; i++ {
		h.Data[i*k+i] -= 0.015 * mean
	}
	if _, err := GPTQ(ctx, w, h, WithDamping(0.01, 0.01, 1)); !errors.Is(err, ErrCholesky) {
		t.Fatalf("one try: %v, want ErrCholesky", err)
	}
	q, err := GPTQ(ctx, w, h, WithDamping(0.01, 0.01, 3))
	if err != nil {
		t.Fatalf("with retries: %v", err)
	}
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	// hopeless: negative definite
	neg := NewHessian(k)
	for i := 0; i < k; i++ {
		neg.Data[i*k+i] = -1
	}
	_, err = GPTQ(ctx, w, neg)
	if !errors.Is(err, ErrCholesky) || !strings.Contains(err.Error(), "blk.9.attn_v.weight") {
		t.Fatalf("negative definite: %v, want ErrCholesky naming the weight", err)
	}
}

func TestGPTQDeadColumnsAndErrors(t *testing.T) {
	ctx := context.Background()
	const k = 64
	w := randMatrix("w", 6, k, 5)
	acts := randMatrix("acts", 200, k, 6)
	for t := 0; t < acts.Rows; t++ {
		acts.Data[t*k+10] = 0 // input 10 is never active
	}
	h := NewHessian(k)
	if err := h.Add(acts.Data, acts.Rows); err != nil {
		t.Fatal(err)
	}
	q, err := GPTQ(ctx, w, h)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < q.N; n++ {
		if c := q.Codes[n*q.KP+10]; c != 0 {
			t.Errorf("row %d: dead column code %d, want 0", n, c)
		}
	}
	if _, err := GPTQ(ctx, w, nil); !errors.Is(err, ErrParam) {
		t.Errorf("nil Hessian: %v", err)
	}
	if _, err := GPTQ(ctx, w, h, WithActOrder(true), WithGroup(32)); !errors.Is(err, ErrParam) {
		t.Errorf("act-order with dynamic groups: %v", err)
	}
	before := append([]float64(nil), h.Data...)
	if _, err := GPTQ(ctx, w, h, WithRotation(true, 2)); err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if before[i] != h.Data[i] {
			t.Fatal("GPTQ modified the caller's Hessian")
		}
	}
}

// TestGPTQBlockSizeInvariant: the lazy batch update is an exact reformulation, so block sizes
// 1 (no batching), 7 (ragged) and 128 give the same codes up to float rounding flips.
func TestGPTQBlockSizeInvariant(t *testing.T) {
	ctx := context.Background()
	w := randMatrix("w", 24, 200, 31)
	acts, err := CorrelatedActivations(400, 200, 32)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHessian(200)
	if err := h.Add(acts.Data, acts.Rows); err != nil {
		t.Fatal(err)
	}
	ref, err := GPTQ(ctx, w, h, WithBlockSize(1), WithGroup(64))
	if err != nil {
		t.Fatal(err)
	}
	for _, bs := range []int{7, 128} {
		q, err := GPTQ(ctx, w, h, WithBlockSize(bs), WithGroup(64), WithWorkers(3))
		if err != nil {
			t.Fatal(err)
		}
		diff := 0
		for i := range q.Codes {
			if q.Codes[i] != ref.Codes[i] {
				diff++
			}
		}
		if diff > len(q.Codes)/500 || math.Abs(q.QErr-ref.QErr) > 1e-3*ref.QErr {
			t.Errorf("block %d: %d of %d codes differ from block 1; qerr %v vs %v", bs, diff, len(q.Codes), q.QErr, ref.QErr)
		}
	}
}

// TestGPTQIsotropicEqualsRTN: with H = c·I, H⁻¹'s Cholesky factor is diagonal, nothing
// propagates, and GPTQ must return exactly RTN's codes and scales.
func TestGPTQIsotropicEqualsRTN(t *testing.T) {
	ctx := context.Background()
	const k = 96
	w := randMatrix("w", 10, k, 41)
	h := NewHessian(k)
	for i := 0; i < k; i++ {
		h.Data[i*k+i] = 3
	}
	for _, g := range []int{0, 32} {
		r, err := RTN(ctx, w, h, WithGroup(g))
		if err != nil {
			t.Fatal(err)
		}
		q, err := GPTQ(ctx, w, h, WithGroup(g))
		if err != nil {
			t.Fatal(err)
		}
		for i := range r.Codes {
			if r.Codes[i] != q.Codes[i] {
				t.Fatalf("group %d: code %d: GPTQ %d, RTN %d", g, i, q.Codes[i], r.Codes[i])
			}
		}
		for i := range r.Scales {
			if r.Scales[i] != q.Scales[i] {
				t.Fatalf("group %d: scale %d: GPTQ %v, RTN %v", g, i, q.Scales[i], r.Scales[i])
			}
		}
	}
}
