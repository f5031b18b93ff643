package quant

import (
	"context"
	"errors"
	"math"
	"testing"
)

// heldOutErr is the squared error of w's board matmul with clip against the float product, over x.
func heldOutErr(t *testing.T, w *Weight, f Matrix, x Matrix, abits int, clip float64) float64 {
	t.Helper()
	y := make([]float32, x.Rows*w.N)
	if err := w.MatMul(context.Background(), x.Data, x.Rows, abits, clip, y, 2); err != nil {
		t.Fatal(err)
	}
	ref := matmulF64(x.Data, x.Rows, f.Data, f.Rows, f.Cols)
	var e float64
	for i, v := range y {
		d := float64(v) - ref[i]
		e += d * d
	}
	return e
}

// TestActClipLowersHeldOutError: for a weight with outlier input channels and activations with outlier
// channels (10x), the clip chosen on a calibration sample lowers the matmul output error on held-out
// activations of the same distribution against no clipping, for W4A4 with and without rotation; for
// W4A8 (where clipping matters little) it stays within sampling noise (0.5%) of no clipping.
func TestActClipLowersHeldOutError(t *testing.T) {
	ctx := context.Background()
	const n, k = 96, 256
	f, err := SyntheticWeight("w", n, k, 7)
	if err != nil {
		t.Fatal(err)
	}
	calibX, err := CorrelatedActivations(512, k, 1)
	if err != nil {
		t.Fatal(err)
	}
	held, err := CorrelatedActivations(512, k, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		abits  int
		rotate bool
		lower  bool // the chosen clip must be < 1 and strictly better held out
	}{
		{"W4A4", 4, false, true},
		{"W4A4 rotated", 4, true, true},
		{"W4A8", 8, false, false},
		{"W4A8 rotated", 8, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{WithBits(4), WithGroup(32)}
			if tc.rotate {
				opts = append(opts, WithRotation(true, 99))
			}
			w, err := RTN(ctx, f, nil, opts...)
			if err != nil {
				t.Fatal(err)
			}
			res, err := SearchActClip(ctx, w, f, calibX.Data, calibX.Rows, tc.abits, DefaultActClipGrid, 0, 2)
			if err != nil {
				t.Fatal(err)
			}
			e1, ec := heldOutErr(t, w, f, held, tc.abits, 1), heldOutErr(t, w, f, held, tc.abits, res.Clip)
			t.Logf("clip %.3f (calibration rel. error %.4f at 1.0, %.4f chosen); held out %.4f -> %.4f", res.Clip,
				math.Sqrt(res.Err[0]/res.Ref), math.Sqrt(minOf(res.Err)/res.Ref), math.Sqrt(e1/res.Ref), math.Sqrt(ec/res.Ref))
			if tc.lower && (res.Clip >= 1 || ec >= e1) {
				t.Fatalf("clip %v: held-out error %g, unclipped %g: want a clip below 1 that lowers it", res.Clip, ec, e1)
			}
			if !tc.lower && ec > e1*1.005 {
				t.Fatalf("clip %v: held-out error %g, unclipped %g: the search made int8 activations worse", res.Clip, ec, e1)
			}
		})
	}
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

// TestSearchActClipIsArgmin: the result is the grid value with the least error, each error is what the
// board matmul (Weight.MatMul) gives over the chosen channels, ties keep the earlier grid value, and a
// channel subset is spread over the rows.
func TestSearchActClipIsArgmin(t *testing.T) {
	ctx := context.Background()
	f := randMatrix("f", 40, 64, 3)
	x := randMatrix("x", 30, 64, 4)
	w, err := RTN(ctx, f, nil, WithBits(4), WithGroup(32), WithRotation(true, 5))
	if err != nil {
		t.Fatal(err)
	}
	grid := []float64{1, 0.9, 0.8, 0.8, 0.7, 0.5}
	res, err := SearchActClip(ctx, w, f, x.Data, x.Rows, 4, grid, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	ch := ActClipChannels(40, 10)
	if res.Channels != 10 || ch[0] != 0 || ch[9] != 36 {
		t.Fatalf("channels %d %v", res.Channels, ch)
	}
	sub := w.rowsOf(ch)
	fs := Matrix{Name: "fs", Rows: len(ch), Cols: 64}
	for _, n := range ch {
		fs.Data = append(fs.Data, f.Row(n)...)
	}
	best := 0
	for i, c := range grid {
		if e := heldOutErr(t, sub, fs, x, 4, c); math.Abs(e-res.Err[i]) > 1e-12*e {
			t.Fatalf("grid %v: error %v, recomputed %v", c, res.Err[i], e)
		}
		if res.Err[i] < res.Err[best] {
			best = i
		}
	}
	if res.Clip != grid[best] || res.Err[2] != res.Err[3] {
		t.Fatalf("clip %v, errors %v: want grid[%d] = %v", res.Clip, res.Err, best, grid[best])
	}
	for _, bad := range [][]float64{nil, {1, 0}, {1.5}, {math.NaN()}} {
		if _, err := SearchActClip(ctx, w, f, x.Data, x.Rows, 4, bad, 0, 1); !errors.Is(err, ErrParam) {
			t.Errorf("grid %v: err %v, want ErrParam", bad, err)
		}
	}
	if _, err := SearchActClip(ctx, w, f, x.Data[:63], 1, 4, grid, 0, 1); !errors.Is(err, ErrShape) {
		t.Errorf("short rows: err %v, want ErrShape", err)
	}
}
