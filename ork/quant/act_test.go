package quant

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
)

// TestMatMulIntExact compares the integer kernel with a straightforward evaluation of the same
// arithmetic (int64 dot products, float64 scaling): they agree to float32 rounding, for partial
// groups, per channel and both widths.
func TestMatMulIntExact(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ bits, abits, group, k int }{
		{4, 4, 32, 172}, {4, 8, 0, 172}, {8, 8, 0, 64}, {4, 4, 128, 300}, {8, 4, 64, 256},
	} {
		w := randMatrix("w", 9, tc.k, uint64(tc.k))
		q, err := RTN(ctx, w, nil, WithBits(tc.bits), WithGroup(tc.group))
		if err != nil {
			t.Fatal(err)
		}
		x := randMatrix("x", 5, tc.k, 77)
		a, err := QuantizeActivations(x.Data, 5, tc.k, tc.abits, 0.9)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, 5*9)
		if err := MatMulInt(ctx, a, q, y, 3); err != nil {
			t.Fatal(err)
		}
		g := effGroup(q.KP, q.Group)
		for tok := 0; tok < 5; tok++ {
			for n := 0; n < 9; n++ {
				want := 0.0
				for gi := 0; gi < q.Groups(); gi++ {
					var dot int64
					for k := gi * g; k < min((gi+1)*g, tc.k); k++ {
						dot += int64(a.Codes[tok*tc.k+k]) * int64(q.Codes[n*tc.k+k])
					}
					want += float64(dot) * float64(q.Scales[n*q.Groups()+gi])
				}
				want *= float64(a.Scales[tok])
				if got := float64(y[tok*9+n]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("%+v: y[%d,%d] = %v, want %v", tc, tok, n, got, want)
				}
			}
		}
	}
}

func TestQuantizeActivations(t *testing.T) {
	x := []float32{0, 1, -2.2, 4, 0.5, -0.3, 0, 0}
	a, err := QuantizeActivations(x, 2, 4, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	// row 0: amax 4 -> scale 4/7; row 1: amax 0.5 -> scale 0.5/7
	if a.Scales[0] != float32(4.0/7) || a.Scales[1] != float32(0.5/7) {
		t.Fatalf("scales %v", a.Scales)
	}
	want := []int8{0, 2, -4, 7, 7, -4, 0, 0}
	for i, c := range a.Codes {
		if c != want[i] {
			t.Fatalf("codes %v, want %v", a.Codes, want)
		}
	}
	// clip 0.5: the largest value clamps at 7, the most negative at -8
	a, err = QuantizeActivations([]float32{-4, 4, 1.2, 0}, 1, 4, 4, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if a.Codes[0] != -8 || a.Codes[1] != 7 || a.Codes[2] != 4 {
		t.Fatalf("clipped codes %v", a.Codes)
	}
	// error bound per token: half a step
	xs := randMatrix("x", 4, 100, 1)
	a8, err := QuantizeActivations(xs.Data, 4, 100, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := a8.Dequantize()
	for i, v := range xs.Data {
		if math.Abs(float64(d[i]-v)) > 0.5*float64(a8.Scales[i/100])*(1+1e-6) {
			t.Fatalf("int8 activation %d: %v vs %v (scale %v)", i, d[i], v, a8.Scales[i/100])
		}
	}
	for _, tc := range []struct {
		bits int
		clip float64
		n    int
		want error
	}{{5, 1, 8, ErrParam}, {4, 0, 8, ErrParam}, {4, 1.5, 8, ErrParam}, {4, 1, 7, ErrShape}} {
		if _, err := QuantizeActivations(x[:tc.n], 2, 4, tc.bits, tc.clip); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v", tc, err)
		}
	}
	if _, err := QuantizeActivations([]float32{float32(math.Inf(1)), 0}, 1, 2, 8, 1); !errors.Is(err, ErrNotFinite) {
		t.Errorf("inf: %v", err)
	}
	// Rows on three goroutines: the error names the first row not finite, and its first such value,
	// whichever goroutine finds which. The rows go in chunks of 25; in the fourth case the first bad
	// value is the last of the first chunk and the others are the first values of the next two, which
	// their goroutines find long before the first chunk's reaches its own: an error kept by which
	// goroutine reports first fails that case in most runs, and the cases run 20 times over.
	prev := runtime.GOMAXPROCS(3)
	defer runtime.GOMAXPROCS(prev)
	const m, k = 300, 256
	var cases [][][2]int
	for range 20 {
		cases = append(cases, [][2]int{{250, 7}}, [][2]int{{250, 9}, {250, 7}, {260, 0}}, [][2]int{{10, 200}, {200, 1}, {299, 255}},
			[][2]int{{24, 255}, {25, 0}, {50, 0}}, [][2]int{{299, 255}})
	}
	for _, bad := range cases {
		big := make([]float32, m*k)
		for i := range big {
			big[i] = float32(i%7) - 3
		}
		for _, b := range bad {
			big[b[0]*k+b[1]] = float32(math.NaN())
		}
		big[bad[len(bad)-1][0]*k+bad[len(bad)-1][1]] = float32(math.Inf(-1))
		first := bad[0]
		for _, b := range bad {
			if b[0] < first[0] || (b[0] == first[0] && b[1] < first[1]) {
				first = b
			}
		}
		_, err := QuantizeActivations(big, m, k, 8, 1)
		if want := fmt.Sprintf("activation row %d col %d is ", first[0], first[1]); !errors.Is(err, ErrNotFinite) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("not finite at %v: %v, want %q...", bad, err, want)
		}
	}
}

// TestQuantizeActivationsKernels checks QuantizeActivations (codes by quantCodes' AVX-512/AVX2 kernels,
// rows on every core for large inputs) against the scalar definition, code for code: int4 and int8,
// clips, row lengths on and off the kernels' multiples of 8 and 4, values on the rounding ties, zero
// rows, and enough rows to run in parallel.
func TestQuantizeActivationsKernels(t *testing.T) {
	for _, tc := range []struct{ m, k int }{{3, 7}, {5, 64}, {9, 133}, {300, 256}, {70, 1030}} {
		x := randMatrix("x", tc.m, tc.k, 3).Data
		for i := range x {
			switch i % 11 {
			case 3:
				x[i] = float32(int(x[i]*8)) / 8 // ties of the int8 scale of a row whose amax is near 1
			case 7:
				x[i] = 0
			}
		}
		clear(x[tc.k : 2*tc.k]) // a zero row: scale 0, codes 0
		for _, bits := range []int{4, 8} {
			for _, clip := range []float64{1, 0.73} {
				a, err := QuantizeActivations(x, tc.m, tc.k, bits, clip)
				if err != nil {
					t.Fatal(err)
				}
				lo, hi := codeRange(bits)
				for r := range tc.m {
					row := x[r*tc.k : (r+1)*tc.k]
					amax := 0.0
					for _, v := range row {
						amax = math.Max(amax, math.Abs(float64(v)))
					}
					s := float32(clip * amax / qmax(bits))
					if a.Scales[r] != s {
						t.Fatalf("%dx%d int%d clip %v row %d: scale %v, want %v", tc.m, tc.k, bits, clip, r, a.Scales[r], s)
					}
					for j, v := range row {
						want := int8(0)
						if s != 0 {
							want = int8(quantCode(float64(v), 1/float64(s), float64(lo), float64(hi)))
						}
						if got := a.Codes[r*tc.k+j]; got != want {
							t.Fatalf("%dx%d int%d clip %v row %d col %d (%v): code %d, want %d", tc.m, tc.k, bits, clip, r, j, v, got, want)
						}
					}
				}
			}
		}
	}
}

// TestWeightMatMul: the emulated W8A8 path (rotated and not, K=172 padded) stays close to the
// float product, and HessianError equals Σ_t ||(W-Q)·x_t||² for H = Σ x·xᵀ.
func TestWeightMatMul(t *testing.T) {
	ctx := context.Background()
	w := randMatrix("w", 12, 172, 51)
	x := randMatrix("x", 6, 172, 52)
	ref := matmulF64(x.Data, 6, w.Data, 12, 172)
	h := NewHessian(172)
	if err := h.Add(x.Data, 6); err != nil {
		t.Fatal(err)
	}
	for _, rot := range []bool{false, true} {
		opts := []Option{WithBits(8), WithGroup(32)}
		if rot {
			opts = append(opts, WithRotation(true, 3))
		}
		q, err := RTN(ctx, w, nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, 6*12)
		if err := q.MatMul(ctx, x.Data, 6, 8, 1, y, 2); err != nil {
			t.Fatal(err)
		}
		if rel := relErr64(y, ref); rel > 0.02 {
			t.Errorf("rotated=%v: W8A8 matmul relative error %v", rot, rel)
		}
		tr, err := HessianError(w, q, h)
		if err != nil {
			t.Fatal(err)
		}
		deq := q.Dequantize()
		if rot {
			back := make([]float32, 12*172)
			if err := q.Rotation.Inverse(back, deq, 12); err != nil {
				t.Fatal(err)
			}
			deq = back
		}
		direct := 0.0
		for tok := 0; tok < 6; tok++ {
			for n := 0; n < 12; n++ {
				e := 0.0
				for k := 0; k < 172; k++ {
					e += (float64(w.Data[n*172+k]) - float64(deq[n*172+k])) * float64(x.Data[tok*172+k])
				}
				direct += e * e
			}
		}
		if math.Abs(tr-direct) > 1e-6*direct {
			t.Errorf("rotated=%v: HessianError %v, direct %v", rot, tr, direct)
		}
	}
	if err := (&Weight{K: 4, KP: 4}).MatMul(ctx, make([]float32, 3), 1, 8, 1, nil, 1); !errors.Is(err, ErrShape) {
		t.Errorf("short activations: %v", err)
	}
}

// TestMatMulIntGroupsBitIdentical: the panel paths of whole groups (a multiple of 8 values) — the
// AVX-512 VNNI kernel and the AVX2 one, each where the CPU has it — give bit for bit what
// MatMulInt's group loop over dotInt8 gives, with codes at the int8 extremes included, per group
// and per channel, with partial panels of rows and partial blocks of tokens. The loop itself
// (both kernels off) is checked against the same reference.
func TestMatMulIntGroupsBitIdentical(t *testing.T) {
	for _, path := range []struct {
		name       string
		vnni, avx2 bool
	}{{"vnni", true, false}, {"avx2", false, true}, {"loop", false, false}} {
		if path.vnni && !useVNNI {
			t.Log("no AVX-512 VNNI on this CPU: the VNNI panel path is not tested here")
			continue
		}
		if path.avx2 && !useAVX2Panels {
			t.Log("no AVX2 on this CPU: the AVX2 panel path is not tested here")
			continue
		}
		t.Run(path.name, func(t *testing.T) {
			defer func(vnni, avx2 bool) { useVNNI, useAVX2Panels = vnni, avx2 }(useVNNI, useAVX2Panels)
			useVNNI, useAVX2Panels = path.vnni, path.avx2
			testMatMulIntGroups(t)
		})
	}
}

func testMatMulIntGroups(t *testing.T) {
	ctx := context.Background()
	rng := uint64(1)
	next := func() uint64 { rng = rng*6364136223846793005 + 1442695040888963407; return rng >> 33 }
	for _, tc := range []struct{ m, n, kp, group int }{
		{5, 7, 64, 16}, {3, 9, 256, 32}, {4, 5, 512, 128}, {2, 3, 4096, 0}, {7, 4, 96, 32},
		{3, 5, 352, 32}, {6, 2, 4096, 32}, {9, 37, 96, 8}, {4, 16, 96, 24}, {8, 33, 192, 64},
		{1, 70, 64, 32}, {3, 5, 17408, 0}, {13, 129, 128, 32}, {5, 17, 40, 8}, {6, 18, 8, 8},
		{11, 40, 264, 24},
	} {
		w := &Weight{N: tc.n, K: tc.kp, KP: tc.kp, Bits: 8, Group: tc.group, Codes: make([]int8, tc.n*tc.kp)}
		w.Scales = make([]float32, tc.n*w.Groups())
		a := &Activations{M: tc.m, K: tc.kp, Codes: make([]int8, tc.m*tc.kp), Scales: make([]float32, tc.m)}
		for i := range w.Codes {
			w.Codes[i] = int8(next())
		}
		for i := range a.Codes {
			a.Codes[i] = int8(next())
		}
		// Runs of extremes: -128·-128 products summed by the pairwise int16 multiply-add.
		for i := 0; i < min(48, tc.kp); i++ {
			w.Codes[i], a.Codes[i] = -128, -128
		}
		for i := range w.Scales {
			w.Scales[i] = float32(next()%1000+1) / 997
		}
		for i := range a.Scales {
			a.Scales[i] = float32(next()%1000+1) / 1009
		}
		got := make([]float32, tc.m*tc.n)
		if err := MatMulInt(ctx, a, w, got, 2); err != nil {
			t.Fatal(err)
		}
		// The same product from panels packed once (PackPanels), bit for bit; none where MatMulInt
		// would not take a panel kernel.
		panels, err := PackPanels(ctx, w, 3)
		if err != nil {
			t.Fatal(err)
		}
		g := effGroup(w.KP, w.Group)
		if wantPanels := w.Groups()*g == w.KP && panelPath(g) != noPanels; (panels != nil) != wantPanels {
			t.Fatalf("%+v: PackPanels gave panels %v, MatMulInt takes a panel kernel %v", tc, panels != nil, wantPanels)
		}
		if panels != nil {
			if panels.Bytes() != PanelBytes(tc.n, tc.kp, tc.group) {
				t.Errorf("%+v: panels hold %d bytes, PanelBytes says %d", tc, panels.Bytes(), PanelBytes(tc.n, tc.kp, tc.group))
			}
			packed := make([]float32, tc.m*tc.n)
			if err := MatMulIntPacked(ctx, a, panels, packed, 2); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if math.Float32bits(packed[i]) != math.Float32bits(got[i]) {
					t.Fatalf("%+v: y[%d] from packed panels %v, MatMulInt %v", tc, i, packed[i], got[i])
				}
			}
		}
		for tok := 0; tok < tc.m; tok++ {
			for n := 0; n < tc.n; n++ {
				var acc float32
				for gi := 0; gi < w.Groups(); gi++ {
					l, h := gi*g, (gi+1)*g
					acc += float32(dotInt8(a.Codes[tok*tc.kp+l:tok*tc.kp+h], w.Codes[n*tc.kp+l:n*tc.kp+h])) * w.Scales[n*w.Groups()+gi]
				}
				want := acc * a.Scales[tok]
				if math.Float32bits(got[tok*tc.n+n]) != math.Float32bits(want) {
					t.Fatalf("%+v: y[%d,%d] = %v, the group loop gives %v", tc, tok, n, got[tok*tc.n+n], want)
				}
			}
		}
	}
}
