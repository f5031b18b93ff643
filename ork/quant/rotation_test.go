package quant

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
)

func TestNewRotationSizes(t *testing.T) {
	for _, tc := range []struct{ k, padded, block int }{
		{64, 64, 64}, {172, 192, 64}, {5120, 5120, 1024}, {17408, 17408, 1024}, {4096, 4096, 4096},
		{32, 32, 32}, {1, 32, 32}, {96, 96, 32}, {100, 128, 128}, {2880, 2880, 64},
	} {
		r, err := NewRotation(tc.k, true, 5)
		if err != nil {
			t.Fatal(err)
		}
		if r.Padded != tc.padded || r.Block != tc.block {
			t.Errorf("K=%d: padded %d block %d, want %d %d", tc.k, r.Padded, r.Block, tc.padded, tc.block)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("K=%d: %v", tc.k, err)
		}
	}
	if _, err := NewRotation(0, false, 0); !errors.Is(err, ErrShape) {
		t.Errorf("K=0: %v, want ErrShape", err)
	}
	bad := Rotation{K: 64, Padded: 64, Block: 48}
	if err := bad.Validate(); !errors.Is(err, ErrParam) {
		t.Errorf("block 48: %v, want ErrParam", err)
	}
}

// TestRotationOrthogonal checks RᵀR = I on the basis vectors, the inverse round trip, and that
// rotating weights and activations identically leaves W·x unchanged.
func TestRotationOrthogonal(t *testing.T) {
	for _, k := range []int{64, 172, 5120, 17408} {
		for _, signs := range []bool{false, true} {
			r, err := NewRotation(k, signs, 11)
			if err != nil {
				t.Fatal(err)
			}
			g := newRNG(uint64(k))
			const rows = 3
			w := make([]float32, rows*k)
			x := make([]float32, k)
			for i := range w {
				w[i] = float32(g.norm())
			}
			for i := range x {
				x[i] = float32(g.norm())
			}
			wr := make([]float32, rows*r.Padded)
			xr := make([]float32, r.Padded)
			if err := r.Apply(wr, w, rows); err != nil {
				t.Fatal(err)
			}
			if err := r.Apply(xr, x, 1); err != nil {
				t.Fatal(err)
			}
			for n := 0; n < rows; n++ {
				var y, yr, nw, nwr float64
				for j := 0; j < k; j++ {
					y += float64(w[n*k+j]) * float64(x[j])
					nw += float64(w[n*k+j]) * float64(w[n*k+j])
				}
				for j := 0; j < r.Padded; j++ {
					yr += float64(wr[n*r.Padded+j]) * float64(xr[j])
					nwr += float64(wr[n*r.Padded+j]) * float64(wr[n*r.Padded+j])
				}
				tol := 1e-5 * math.Sqrt(float64(k))
				if math.Abs(y-yr) > tol {
					t.Errorf("K=%d signs=%v row %d: W·x %v, rotated %v", k, signs, n, y, yr)
				}
				if math.Abs(nw-nwr) > 1e-5*nw {
					t.Errorf("K=%d signs=%v row %d: norm² %v, rotated %v", k, signs, n, nw, nwr)
				}
			}
			back := make([]float32, rows*k)
			if err := r.Inverse(back, wr, rows); err != nil {
				t.Fatal(err)
			}
			for i := range w {
				if math.Abs(float64(back[i]-w[i])) > 1e-5 {
					t.Fatalf("K=%d signs=%v: inverse[%d] = %v, want %v", k, signs, i, back[i], w[i])
				}
			}
		}
	}
}

// TestRotationBasis checks orthonormality exactly on a small size: the rotated basis vectors
// are orthonormal, and padded directions map into the padded space.
func TestRotationBasis(t *testing.T) {
	for _, k := range []int{64, 172} {
		r, _ := NewRotation(k, true, 3)
		basis := make([]float32, k*k)
		for i := 0; i < k; i++ {
			basis[i*k+i] = 1
		}
		rot := make([]float32, k*r.Padded)
		if err := r.Apply(rot, basis, k); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				dot := 0.0
				for c := 0; c < r.Padded; c++ {
					dot += float64(rot[i*r.Padded+c]) * float64(rot[j*r.Padded+c])
				}
				want := 0.0
				if i == j {
					want = 1
				}
				if math.Abs(dot-want) > 1e-6 {
					t.Fatalf("K=%d: <R e%d, R e%d> = %v, want %v", k, i, j, dot, want)
				}
			}
		}
	}
}

func TestRotateHessianMatchesRotatedActivations(t *testing.T) {
	const k, tokens = 172, 50
	r, _ := NewRotation(k, true, 8)
	x, err := SpikedActivations(tokens, k, 4)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHessian(k)
	if err := h.Add(x.Data, tokens); err != nil {
		t.Fatal(err)
	}
	xr := make([]float32, tokens*r.Padded)
	if err := r.Apply(xr, x.Data, tokens); err != nil {
		t.Fatal(err)
	}
	hr := NewHessian(r.Padded)
	if err := hr.Add(xr, tokens); err != nil {
		t.Fatal(err)
	}
	got := r.rotateHessian(h.Data, 2)
	for i, v := range hr.Data {
		if math.Abs(got[i]-v) > 1e-3*(1+math.Abs(v)) {
			t.Fatalf("R H Rᵀ[%d,%d] = %v, Hessian of rotated activations %v", i/r.Padded, i%r.Padded, got[i], v)
		}
	}
}

// TestHessianDiagMatchesRotateHessian: the diagonal from H's diagonal blocks is bit for bit the
// diagonal of the whole rotated Hessian, padded or not, signed or not, for every block size.
func TestHessianDiagMatchesRotateHessian(t *testing.T) {
	for _, tc := range []struct {
		k, minBlock int
		signs       bool
	}{
		{64, 32, true}, {96, 32, false}, {172, 32, true}, {172, 256, true}, {300, 32, true}, {320, 32, false}, {512, 32, true},
	} {
		r, err := NewRotationMinBlock(tc.k, tc.signs, uint64(tc.k), tc.minBlock)
		if err != nil {
			t.Fatal(err)
		}
		x, err := SpikedActivations(3*tc.k, tc.k, 4)
		if err != nil {
			t.Fatal(err)
		}
		h := NewHessian(tc.k)
		if err := h.Add(x.Data, x.Rows); err != nil {
			t.Fatal(err)
		}
		full := r.rotateHessian(h.Data, 1)
		got := r.hessianDiag(h.Data)
		if len(got) != r.Padded {
			t.Fatalf("%+v: %d values, want %d", r, len(got), r.Padded)
		}
		for j, v := range got {
			if want := full[j*r.Padded+j]; math.Float64bits(v) != math.Float64bits(want) {
				t.Fatalf("%+v: diag[%d] = %v, rotateHessian's %v", r, j, v, want)
			}
		}
	}
}

// TestRotationMinBlock: a minimum block pads K further only when its own blocks would be smaller; the
// padded rotation is still orthogonal (rows round-trip), and RTN and GPTQ store the padded length.
func TestRotationMinBlock(t *testing.T) {
	for _, tc := range []struct{ k, min, padded, block int }{
		{172, 32, 192, 64}, {172, 256, 256, 256}, {96, 128, 128, 128}, {5120, 256, 5120, 1024}, {64, 256, 256, 256}, {17408, 2048, 18432, 2048},
	} {
		r, err := NewRotationMinBlock(tc.k, true, 9, tc.min)
		if err != nil || r.Padded != tc.padded || r.Block != tc.block || r.Validate() != nil {
			t.Errorf("K=%d min %d: %+v %v, want padded %d block %d", tc.k, tc.min, r, err, tc.padded, tc.block)
		}
	}
	for _, bad := range []int{16, 96, 0} {
		if _, err := NewRotationMinBlock(64, true, 1, bad); !errors.Is(err, ErrParam) {
			t.Errorf("min block %d: %v", bad, err)
		}
	}
	r, _ := NewRotationMinBlock(172, true, 3, 256)
	x := randMatrix("x", 3, 172, 5)
	xr := make([]float32, 3*256)
	back := make([]float32, 3*172)
	if err := r.Apply(xr, x.Data, 3); err != nil {
		t.Fatal(err)
	}
	if err := r.Inverse(back, xr, 3); err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if math.Abs(float64(back[i]-x.Data[i])) > 1e-5 {
			t.Fatalf("round trip value %d: %v, want %v", i, back[i], x.Data[i])
		}
	}
	w := randMatrix("w", 8, 172, 6)
	h := NewHessian(172)
	if err := h.Add(randMatrix("a", 200, 172, 7).Data, 200); err != nil {
		t.Fatal(err)
	}
	for _, q := range []func() (*Weight, error){
		func() (*Weight, error) {
			return RTN(context.Background(), w, nil, WithRotation(true, 3), WithRotationMinBlock(256))
		},
		func() (*Weight, error) {
			return GPTQ(context.Background(), w, h, WithRotation(true, 3), WithRotationMinBlock(256))
		},
	} {
		qw, err := q()
		if err != nil || qw.KP != 256 || qw.Rotation != r || qw.Validate() != nil {
			t.Fatalf("quantized with min block 256: %v, KP %d rotation %+v", err, qw.KP, qw.Rotation)
		}
	}
}

// TestGPTQRotationSearch: a search of n seeds runs GPTQ with the seed whose RTN weights have the least
// HessianError, equal byte for byte to GPTQ run with that seed alone; a search of one seed is plain
// GPTQ; the caller's Hessian is only consumed by that one GPTQ run (not by the trials); bad counts and
// unsigned rotations are refused.
func TestGPTQRotationSearch(t *testing.T) {
	ctx := context.Background()
	w := randMatrix("w", 24, 96, 11)
	for n := 0; n < w.Rows; n++ { // an outlier input channel, as real activations have
		w.Data[n*w.Cols+5] *= 8
	}
	h := NewHessian(96)
	acts := randMatrix("a", 400, 96, 12)
	for t := 0; t < acts.Rows; t++ {
		acts.Data[t*acts.Cols+7] *= 10
	}
	if err := h.Add(acts.Data, acts.Rows); err != nil {
		t.Fatal(err)
	}
	h0 := append([]float64(nil), h.Data...)
	opts := []Option{WithRotation(true, 41), WithNegativeScales(true)}
	const n = 5
	errs := make([]float64, n)
	for i := range n {
		q, err := RTN(ctx, w, h, append(opts, WithRotation(true, SearchSeed(41, i)))...)
		if err != nil {
			t.Fatal(err)
		}
		if errs[i], err = HessianError(w, q, h); err != nil {
			t.Fatal(err)
		}
	}
	best := 0
	for i, e := range errs {
		if e < errs[best] {
			best = i
		}
	}
	if best == 0 || best == n-1 {
		t.Fatalf("RTN errors %v: the best seed is the first or the last, the test shows less", errs)
	}
	want, err := GPTQ(ctx, w, h, append(opts, WithRotation(true, SearchSeed(41, best)))...)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := GPTQ(ctx, w, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.Data, h0) {
		t.Fatal("GPTQ without WithConsumeHessian modified the Hessian")
	}
	one, err := GPTQ(ctx, w, h, append(opts, WithRotationSearch(1))...)
	if err != nil || !slices.Equal(one.Codes, plain.Codes) || one.Rotation.Seed != 41 {
		t.Errorf("a search of one seed differs from plain GPTQ (%v)", err)
	}
	got, err := GPTQ(ctx, w, h, append(opts, WithRotationSearch(n))...)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.Data, h0) {
		t.Error("the search modified the caller's Hessian")
	}
	if got.Rotation.Seed != SearchSeed(41, best) || !slices.Equal(got.Codes, want.Codes) || !slices.Equal(got.Scales, want.Scales) {
		t.Errorf("search ran GPTQ with seed %d, want %d (RTN errors %v)", got.Rotation.Seed, SearchSeed(41, best), errs)
	}
	for _, bad := range []int{0, MaxRotationSearch + 1} {
		if _, err := GPTQ(ctx, w, h, append(opts, WithRotationSearch(bad))...); !errors.Is(err, ErrParam) {
			t.Errorf("search of %d seeds: %v, want ErrParam", bad, err)
		}
	}
	if _, err := GPTQ(ctx, w, h, WithRotation(false, 0), WithRotationSearch(3)); !errors.Is(err, ErrParam) {
		t.Errorf("search with an unsigned rotation: %v, want ErrParam", err)
	}
}

// fwhtBlocksRadix2 is the plain radix-2 transform fwhtBlocks must equal bit for bit.
func fwhtBlocksRadix2(x []float64, b int) {
	norm := 1 / math.Sqrt(float64(b))
	for off := 0; off < len(x); off += b {
		v := x[off : off+b]
		for h := 1; h < b; h <<= 1 {
			for i := 0; i < b; i += h << 1 {
				for j := i; j < i+h; j++ {
					v[j], v[j+h] = v[j]+v[j+h], v[j]-v[j+h]
				}
			}
		}
		for j := range v {
			v[j] *= norm
		}
	}
}

// TestFWHTBlocksRadix2: the radix-4 transform gives the radix-2 one's values bit for bit, for even
// and odd powers of two, one block or several.
func TestFWHTBlocksRadix2(t *testing.T) {
	for _, b := range []int{1, 2, 4, 8, 32, 64, 128, 256, 1024, 2048} {
		for _, blocks := range []int{1, 3} {
			x := randMatrix("x", 1, b*blocks, uint64(b+blocks)).Data
			got, want := make([]float64, len(x)), make([]float64, len(x))
			for i, v := range x {
				got[i], want[i] = float64(v)*1e3, float64(v)*1e3
			}
			fwhtBlocks(got, b)
			fwhtBlocksRadix2(want, b)
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("b=%d blocks=%d: value %d is %v, radix-2 %v", b, blocks, i, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkHessianDiag is the rotated diag(H) of a 4096 x 4096 Hessian with one 4096 block (the
// worst case: K a power of two).
func BenchmarkHessianDiag(b *testing.B) {
	const k = 4096
	r, err := NewRotation(k, true, 3)
	if err != nil {
		b.Fatal(err)
	}
	h := make([]float64, k*k)
	for i, v := range randMatrix("h", k, k, 2).Data {
		h[i] = float64(v)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.hessianDiag(h)
	}
}

// rotateHessianPlain is rotateHessianInto as one loop over the whole matrix at a time (rows, the
// transpose, rows, the symmetrization): the oracle for the tiled, parallel form.
func rotateHessianPlain(r Rotation, out, h []float64) []float64 {
	k, p := r.K, r.Padded
	d := r.signVector()
	for i := 0; i < k; i++ {
		row := out[i*p : (i+1)*p]
		copy(row, h[i*k:(i+1)*k])
		r.rotate64(row, d)
	}
	for i := 0; i < p; i++ {
		for j := i + 1; j < p; j++ {
			out[i*p+j], out[j*p+i] = out[j*p+i], out[i*p+j]
		}
	}
	for j := 0; j < p; j++ {
		r.rotate64(out[j*p:(j+1)*p], d)
	}
	for i := 0; i < p; i++ {
		for j := i + 1; j < p; j++ {
			v := 0.5 * (out[i*p+j] + out[j*p+i])
			out[i*p+j], out[j*p+i] = v, v
		}
	}
	return out
}

// TestRotateHessianTiles: the tiled, parallel rotation of a Hessian gives the plain loops' bits, into
// a new padded matrix and in place, on 1 and 3 goroutines, for widths of 2 to 64 tiles of 16 (a
// padded width is a multiple of the rotation's block, so of 16; reflectUpper's test covers tiles cut
// short).
func TestRotateHessianTiles(t *testing.T) {
	for _, tc := range []struct {
		k, minBlock int
		signs       bool
	}{
		{32, 32, true}, {64, 32, false}, {172, 32, true}, {300, 32, true}, {320, 64, false}, {1000, 32, true},
	} {
		r, err := NewRotationMinBlock(tc.k, tc.signs, uint64(tc.k), tc.minBlock)
		if err != nil {
			t.Fatal(err)
		}
		x, err := SpikedActivations(2*tc.k, tc.k, 4)
		if err != nil {
			t.Fatal(err)
		}
		h := NewHessian(tc.k)
		if err := h.Add(x.Data, x.Rows); err != nil {
			t.Fatal(err)
		}
		want := rotateHessianPlain(r, make([]float64, r.Padded*r.Padded), h.Data)
		for _, workers := range []int{1, 3} {
			outs := map[string][]float64{"new matrix": r.rotateHessian(h.Data, workers)}
			if r.Padded == r.K {
				inPlace := slices.Clone(h.Data)
				outs["in place"] = r.rotateHessianInto(inPlace, inPlace, workers)
			}
			for how, got := range outs {
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("K %d (padded %d), %s, %d workers: [%d,%d] = %v, plain loops %v", tc.k, r.Padded, how, workers, i/r.Padded, i%r.Padded, got[i], want[i])
					}
				}
			}
		}
	}
}
