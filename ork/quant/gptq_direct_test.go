package quant

import (
	"context"
	"errors"
	"math"
	"testing"
)

// TestGPTQDirectMatchesClassic: the direct row phase (M = U⁻¹, no triangular inverse) quantizes as the
// classic one does (U from the inverse) up to rounding: on correlated activations' Hessians, every
// option it runs with, the codes agree but for a few ties (at most 1 in 2000), the scales too, and the
// weighted errors to 1e-9. Without T at a block's start, or with T's sign flipped, the codes differ in
// most rows. The last configuration is one the direct phase does not take (useDirect false): there
// both runs are the classic phase and only useDirect's answer is under test.
func TestGPTQDirectMatchesClassic(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		n, k    int
		dead    int // columns whose input is always zero
		opts    []Option
		classic bool // the direct phase does not take these options
	}{
		{"g32 static", 40, 300, 0, []Option{WithGroup(32), WithStaticGroups(true)}, false},
		// Ten blocks, the last one short.
		{"g32 dynamic, K 1200", 24, 1200, 2, []Option{WithGroup(32)}, false},
		{"g32 dynamic", 40, 300, 3, []Option{WithGroup(32)}, false},
		{"per row", 33, 257, 0, nil, false},
		{"g32 rotated", 40, 300, 0, []Option{WithGroup(32), WithRotation(true, 7)}, false},
		{"act order g32 static", 40, 300, 2, []Option{WithGroup(32), WithStaticGroups(true), WithActOrder(true)}, false},
		{"gptq scale search", 24, 256, 0, []Option{WithGroup(32), WithScaleSearch(ScaleSearchGPTQ), WithNegativeScales(true)}, false},
		{"8 bits block 64", 40, 300, 0, []Option{WithBits(8), WithGroup(64), WithBlockSize(64), WithWorkers(3)}, false},
		{"g128 dynamic block 64 (classic)", 24, 300, 0, []Option{WithGroup(128), WithBlockSize(64)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := randMatrix("w", tc.n, tc.k, 11)
			acts, err := CorrelatedActivations(2*tc.k, tc.k, 12)
			if err != nil {
				t.Fatal(err)
			}
			for r := range acts.Rows {
				for c := range tc.dead {
					acts.Data[r*tc.k+5+7*c] = 0
				}
			}
			h := NewHessian(tc.k)
			if err := h.Add(acts.Data, acts.Rows); err != nil {
				t.Fatal(err)
			}
			c, err := newConfig(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := useDirect(c, effGroup(tc.k, c.group), c.staticGroups || c.group == 0); got == tc.classic {
				t.Fatalf("useDirect %v, want %v", got, !tc.classic)
			}
			run := func(direct bool) *Weight {
				defer func(prev bool) { directPhase = prev }(directPhase)
				directPhase = direct
				q, err := GPTQ(ctx, w, h, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				return q
			}
			d, ref := run(true), run(false)
			t.Logf("codes differ %d of %d, qerr %v vs %v", codesDiffer(d, ref), len(ref.Codes), d.QErr, ref.QErr)
			if diff := codesDiffer(d, ref); diff*2000 > len(ref.Codes) {
				t.Errorf("%d of %d codes differ", diff, len(ref.Codes))
			}
			sd := 0
			for i := range ref.Scales {
				if d.Scales[i] != ref.Scales[i] {
					sd++
				}
			}
			if sd*2000 > len(ref.Scales)+1000 {
				t.Errorf("%d of %d scales differ", sd, len(ref.Scales))
			}
			if math.Abs(d.QErr-ref.QErr) > 1e-9*ref.QErr {
				t.Errorf("qerr %v, classic %v", d.QErr, ref.QErr)
			}
		})
	}
}

// TestUseDirect: what reads U beyond its diagonal blocks runs the classic phase.
func TestUseDirect(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want bool
	}{
		{[]Option{WithGroup(32)}, true},
		{[]Option{WithGroup(32), WithStaticGroups(true), WithActOrder(true)}, true},
		{[]Option{WithGroup(32), WithScaleRefit(2, 4)}, false},
		{[]Option{WithGroup(32), WithQuantizedInputs(InputsAsymmetric, make([]float32, 64*64), 64, 8, []float64{1})}, false},
		{[]Option{WithGroup(32), WithQuantizedInputs(InputsQuantized, make([]float32, 64*64), 64, 8, []float64{1})}, true},
		{[]Option{WithGroup(256)}, false}, // dynamic groups wider than the block
		{[]Option{WithGroup(256), WithStaticGroups(true)}, true},
	} {
		c, err := newConfig(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := useDirect(c, effGroup(512, c.group), c.staticGroups || c.group == 0); got != tc.want {
			t.Errorf("%+v: useDirect %v, want %v", c, got, tc.want)
		}
	}
}

func codesDiffer(a, b *Weight) int {
	n := 0
	for i := range a.Codes {
		if a.Codes[i] != b.Codes[i] {
			n++
		}
	}
	return n
}

// TestDirectFactor: the diagonal blocks returned are the inverses of M's (the short last block
// included), M's diagonal blocks stay, and every block above them is M's times the inverse of the
// diagonal block below it.
func TestDirectFactor(t *testing.T) {
	const kp, bs = 10, 4
	m := make([]float64, kp*kp)
	for i := range kp {
		for j := i; j < kp; j++ {
			m[i*kp+j] = 1 / float64(1+i+2*j)
		}
		m[i*kp+i] += 1
	}
	p := append([]float64(nil), m...)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := directFactor(cancelled, append([]float64(nil), m...), kp, bs); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}
	ud, err := directFactor(context.Background(), p, kp, bs)
	if err != nil {
		t.Fatal(err)
	}
	for b := 0; b*bs < kp; b++ {
		i1, n := b*bs, min(bs, kp-b*bs)
		u := ud[b*bs*bs:]
		for r := range n {
			for c := range n {
				var s float64 // (M_LL·U_LL)[r][c]
				for a := range n {
					s += m[(i1+r)*kp+i1+a] * u[a*bs+c]
				}
				if want := float64(b2f(r == c)); math.Abs(s-want) > 1e-12 {
					t.Errorf("block %d: (M·U)[%d][%d] = %v", b, r, c, s)
				}
				if c >= r && p[(i1+r)*kp+i1+c] != m[(i1+r)*kp+i1+c] {
					t.Errorf("block %d: M's diagonal block changed at (%d, %d)", b, r, c)
				}
			}
		}
		for r := range i1 { // P_<L,L = M_<L,L·U_LL
			for c := range n {
				var s float64
				for a := range n {
					s += m[r*kp+i1+a] * u[a*bs+c]
				}
				if got := p[r*kp+i1+c]; math.Abs(got-s) > 1e-12 {
					t.Errorf("P[%d][%d] = %v, want %v", r, i1+c, got, s)
				}
			}
		}
	}
}

func b2f(b bool) int {
	if b {
		return 1
	}
	return 0
}
