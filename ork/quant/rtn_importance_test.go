package quant

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
)

// TestRTNImportanceMatchesDiagonalHessian: RTNImportance gives the same codes, scales and qerr as
// RTN with the K x K Hessian diag(importance), without building it.
func TestRTNImportanceMatchesDiagonalHessian(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ bits, group, k int }{{4, 0, 64}, {4, 32, 96}, {8, 64, 172}} {
		m := randMatrix("w", 9, tc.k, uint64(tc.k))
		imp := make([]float64, tc.k)
		g := newRNG(7)
		for i := range imp {
			imp[i] = math.Exp(2 * g.norm()) // heavy-tailed like real mean x²
		}
		h := &Hessian{K: tc.k, Data: make([]float64, tc.k*tc.k), Tokens: 1}
		for i, v := range imp {
			h.Data[i*tc.k+i] = v
		}
		opts := []Option{WithBits(tc.bits), WithGroup(tc.group), WithClipGrid(DefaultClipGrid)}
		want, err := RTN(ctx, m, h, opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RTNImportance(ctx, m, imp, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Codes, want.Codes) || !slices.Equal(got.Scales, want.Scales) || got.QErr != want.QErr {
			t.Errorf("bits %d group %d K %d: RTNImportance differs from RTN with diag(H) (qerr %v vs %v)", tc.bits, tc.group, tc.k, got.QErr, want.QErr)
		}
	}
}

// TestRTNImportanceNeverWorse: per group the weighted clip search minimises the weighted error
// over the grid, so its importance-weighted error is never above plain RTN's, and it is strictly
// lower on this matrix with a skewed importance.
func TestRTNImportanceNeverWorse(t *testing.T) {
	ctx := context.Background()
	m := randMatrix("w", 32, 128, 11)
	imp := make([]float64, 128)
	for i := range imp {
		imp[i] = 1
		if i%16 == 3 {
			imp[i] = 50
		}
	}
	opts := []Option{WithBits(4), WithGroup(32), WithClipGrid(DefaultClipGrid)}
	plain, err := RTN(ctx, m, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	weighted, err := RTNImportance(ctx, m, imp, opts...)
	if err != nil {
		t.Fatal(err)
	}
	plainW := weightedRelErr(plain, m.Data, imp)
	if weighted.QErr > plainW {
		t.Errorf("weighted qerr %v > plain RTN's weighted error %v", weighted.QErr, plainW)
	}
	if !(weighted.QErr < plainW) {
		t.Errorf("weighted qerr %v not below plain %v: the importance changed nothing", weighted.QErr, plainW)
	}
	t.Logf("importance-weighted error: plain RTN %.5f, RTN with importance %.5f (ratio %.3f)", plainW, weighted.QErr, weighted.QErr/plainW)
}

func TestRTNImportanceErrors(t *testing.T) {
	ctx := context.Background()
	m := randMatrix("blk.0.ffn_up.weight", 4, 64, 1)
	ones := make([]float64, 64)
	for i := range ones {
		ones[i] = 1
	}
	neg := slices.Clone(ones)
	neg[5] = -1
	nan := slices.Clone(ones)
	nan[6] = math.NaN()
	for _, tc := range []struct {
		name string
		imp  []float64
		opts []Option
		want error
	}{
		{"rotation", ones, []Option{WithRotation(true, 1)}, ErrParam},
		{"short", ones[:63], nil, ErrShape},
		{"negative", neg, nil, ErrNotFinite},
		{"nan", nan, nil, ErrNotFinite},
		{"all zero", make([]float64, 64), nil, ErrParam},
	} {
		_, err := RTNImportance(ctx, m, tc.imp, tc.opts...)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// BenchmarkRTNImportance compares RTN with an importance vector against plain RTN (the baseline, in
// the same run) on a 512 x 4096 weight, I4 group 32.
func BenchmarkRTNImportance(b *testing.B) {
	ctx := context.Background()
	m := randMatrix("w", 512, 4096, 3)
	imp := make([]float64, 4096)
	g := newRNG(5)
	for i := range imp {
		imp[i] = math.Exp(g.norm())
	}
	opts := []Option{WithBits(4), WithGroup(32), WithClipGrid(DefaultClipGrid), WithWorkers(1)}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if _, err := RTN(ctx, m, nil, opts...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("importance", func(b *testing.B) {
		for b.Loop() {
			if _, err := RTNImportance(ctx, m, imp, opts...); err != nil {
				b.Fatal(err)
			}
		}
	})
}
