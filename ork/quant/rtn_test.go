package quant

import (
	"context"
	"errors"
	"math"
	"testing"
)

func randMatrix(name string, n, k int, seed uint64) Matrix {
	g := newRNG(seed)
	m := Matrix{Name: name, Rows: n, Cols: k, Data: make([]float32, n*k)}
	for i := range m.Data {
		m.Data[i] = float32(g.norm())
	}
	return m
}

// TestRTNBounds: without clipping every element is within half a step of its value; with the
// clip grid the squared error never exceeds the unclipped one; partial last groups get their own
// scale; codes stay in range.
func TestRTNBounds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		bits, group, k int
	}{
		{4, 0, 64}, {4, 32, 172}, {4, 64, 172}, {4, 128, 300}, {4, 256, 300}, {4, 512, 520},
		{8, 0, 172}, {8, 32, 172}, {8, 128, 64},
	} {
		m := randMatrix("w", 7, tc.k, uint64(tc.k+tc.group))
		m.Data[3] = 25 // an outlier
		noclip, err := RTN(ctx, m, nil, WithBits(tc.bits), WithGroup(tc.group), WithClipGrid([]float64{1}))
		if err != nil {
			t.Fatal(err)
		}
		if err := noclip.Validate(); err != nil {
			t.Fatal(err)
		}
		wantGroups := 1
		if tc.group > 0 {
			wantGroups = (tc.k + tc.group - 1) / tc.group
		}
		if noclip.Groups() != wantGroups {
			t.Fatalf("bits %d group %d K %d: %d groups, want %d", tc.bits, tc.group, tc.k, noclip.Groups(), wantGroups)
		}
		deq := noclip.Dequantize()
		g := effGroup(tc.k, tc.group)
		for n := 0; n < m.Rows; n++ {
			for k := 0; k < tc.k; k++ {
				s := float64(noclip.Scales[n*wantGroups+k/g])
				// the scale is amax/qmax of this very group (partial last group included)
				if d := math.Abs(float64(deq[n*tc.k+k] - m.Data[n*tc.k+k])); d > 0.5*s*(1+1e-6) {
					t.Fatalf("bits %d group %d K %d: element (%d,%d) off by %v > half step %v", tc.bits, tc.group, tc.k, n, k, d, s/2)
				}
			}
			for gi := 0; gi < wantGroups; gi++ {
				lo, hi := gi*g, min((gi+1)*g, tc.k)
				amax := 0.0
				for _, v := range m.Data[n*tc.k+lo : n*tc.k+hi] {
					amax = math.Max(amax, math.Abs(float64(v)))
				}
				if want := float32(amax / qmax(tc.bits)); noclip.Scales[n*wantGroups+gi] != want {
					t.Fatalf("group %d of row %d: scale %v, want amax/qmax %v", gi, n, noclip.Scales[n*wantGroups+gi], want)
				}
			}
		}
		clipped, err := RTN(ctx, m, nil, WithBits(tc.bits), WithGroup(tc.group))
		if err != nil {
			t.Fatal(err)
		}
		if clipped.QErr > noclip.QErr*(1+1e-12) {
			t.Errorf("bits %d group %d: clip search error %v above unclipped %v", tc.bits, tc.group, clipped.QErr, noclip.QErr)
		}
		if rel := relErr32(clipped.Dequantize(), m.Data); math.Abs(rel-clipped.QErr) > 1e-6*rel {
			t.Errorf("QErr %v != relative Frobenius error %v", clipped.QErr, rel)
		}
	}
}

// TestRTNRelativeErrorBounds: on Gaussian weights the relative error of each scheme lies in the
// band its step size implies (a regression net for the scale convention).
func TestRTNRelativeErrorBounds(t *testing.T) {
	ctx := context.Background()
	m := randMatrix("gauss", 64, 512, 1)
	for _, tc := range []struct {
		bits, group int
		lo, hi      float64
	}{
		{4, 0, 0.10, 0.16}, {4, 32, 0.08, 0.12}, {8, 0, 0.004, 0.009}, {8, 32, 0.003, 0.007},
	} {
		q, err := RTN(ctx, m, nil, WithBits(tc.bits), WithGroup(tc.group))
		if err != nil {
			t.Fatal(err)
		}
		if q.QErr < tc.lo || q.QErr > tc.hi {
			t.Errorf("int%d group %d: relative error %.5f outside [%v, %v]", tc.bits, tc.group, q.QErr, tc.lo, tc.hi)
		}
	}
}

func TestRTNRotatedPadded(t *testing.T) {
	// ffn_down-like: K = 172 has no power-of-two divisor >= 32: padded to 192 = 3 x 64.
	m := randMatrix("blk.0.ffn_down.weight", 16, 172, 2)
	q, err := RTN(context.Background(), m, nil, WithGroup(32), WithRotation(true, 1))
	if err != nil {
		t.Fatal(err)
	}
	if q.KP != 192 || q.Rotation.Block != 64 || q.Groups() != 6 || len(q.Codes) != 16*192 {
		t.Fatalf("KP %d block %d groups %d codes %d", q.KP, q.Rotation.Block, q.Groups(), len(q.Codes))
	}
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	// back to the original space: close to W
	back := make([]float32, 16*172)
	if err := q.Rotation.Inverse(back, q.Dequantize(), 16); err != nil {
		t.Fatal(err)
	}
	// The padded coordinates' share of the error is dropped by the inverse (a zero-padded
	// activation never sees it), so the original-space error is at most QErr.
	if rel := relErr32(back, m.Data); rel > 0.12 || rel > q.QErr*(1+1e-6) {
		t.Errorf("rotated relative error %v (QErr %v)", rel, q.QErr)
	}
}

func TestRTNErrors(t *testing.T) {
	ctx := context.Background()
	m := randMatrix("blk.3.attn_q.weight", 4, 64, 1)
	for _, tc := range []struct {
		name string
		opts []Option
		want error
	}{
		{"bits", []Option{WithBits(3)}, ErrParam},
		{"group", []Option{WithGroup(48)}, ErrParam},
		{"clip", []Option{WithClipGrid([]float64{1.2})}, ErrParam},
		{"empty clip", []Option{WithClipGrid(nil)}, ErrParam},
		{"workers", []Option{WithWorkers(0)}, ErrParam},
	} {
		if _, err := RTN(ctx, m, nil, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	bad := m
	bad.Data = append([]float32(nil), m.Data...)
	bad.Data[70] = float32(math.NaN())
	if _, err := RTN(ctx, bad, nil); !errors.Is(err, ErrNotFinite) {
		t.Errorf("NaN: %v", err)
	}
	short := Matrix{Name: "x", Rows: 4, Cols: 64, Data: make([]float32, 10)}
	if _, err := RTN(ctx, short, nil); !errors.Is(err, ErrShape) {
		t.Errorf("short: %v", err)
	}
	h := NewHessian(32)
	if _, err := RTN(ctx, m, h); !errors.Is(err, ErrShape) {
		t.Errorf("hessian size: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := RTN(cctx, m, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
