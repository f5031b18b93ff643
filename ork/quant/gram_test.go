package quant

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/ork/quant/internal/kernel"
)

// gramPaths are the ways gramTile can run on this machine: the pure-Go reference, and the AVX2 and
// AVX-512 kernels where the CPU has them.
func gramPaths() []string {
	paths := []string{"go"}
	if kernel.AvailableFMA {
		paths = append(paths, "avx2")
	}
	if kernel.Available512 && kernel.AvailableFMA {
		paths = append(paths, "avx512")
	}
	return paths
}

// withGramPath runs f with gramTile restricted to path.
func withGramPath(path string, f func()) {
	s512, s256 := gram512, gram256
	defer func() { gram512, gram256 = s512, s256 }()
	gram512, gram256 = path == "avx512", path == "avx2"
	f()
}

// gramTileCase is a random block pair: h a gi x g block of stride hs with values over twelve
// decades (so that a product rounded apart from its sum shows), codes in [-8, 7] (a tenth of them
// -0 or 0) or, with wide, any values.
func gramTileCase(rng *rand.Rand, gi, g, hs, cs, rows int, wide bool) (h, ci, cj []float64) {
	h = make([]float64, (gi-1)*hs+g)
	for i := range h {
		h[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6))
	}
	code := func() float64 {
		switch {
		case wide:
			return rng.NormFloat64() * 1e3
		case rng.IntN(10) == 0:
			return math.Copysign(0, float64(rng.IntN(2)*2-1))
		}
		return float64(rng.IntN(16) - 8)
	}
	ci, cj = make([]float64, (gi-1)*cs+rows), make([]float64, (g-1)*cs+rows)
	for i := range ci {
		ci[i] = code()
	}
	for i := range cj {
		cj[i] = code()
	}
	return h, ci, cj
}

// tileShape is case n's block and layout for the tile tests: widths the kernels take and those they
// leave to the reference, full and short blocks, strides past the block, one to four row tiles.
func tileShape(rng *rand.Rand, n int) (g, gi, hs, rows, cs int) {
	g = []int{32, 8, 16, 64, 40, 4, 12, 3}[n%8]
	gi = []int{g, 1, 1 + rng.IntN(g)}[n%3]
	hs = g + []int{0, 5, 64}[n%3]
	rows = []int{16, 48, 64}[(n/3)%3]
	cs = rows + []int{0, 16}[n%2]
	return g, gi, hs, rows, cs
}

// fuzzTileShape is a fuzz case's block and layout: a width a multiple of 4 up to 128.
func fuzzTileShape(rng *rand.Rand, gi8, g8, tiles uint8) (g, gi, hs, rows, cs int) {
	g = 4 * (1 + int(g8)%32)
	gi = 1 + int(gi8)%g
	rows = 16 * (1 + int(tiles)%4)
	return g, gi, g + rng.IntN(9), rows, rows + rng.IntN(17)
}

// TestGramTileMatchesReference: the Gram kernels give gramTileGo's entries bit for bit, for group
// widths the kernels take and those they leave to the reference, short blocks (the last group's
// rows), strides past the block and several row tiles; and the reference is the entry c_iᵀ·H·c_j.
func TestGramTileMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 3))
	for n := 0; n < 600; n++ {
		g, gi, hs, rows, cs := tileShape(rng, n)
		h, ci, cj := gramTileCase(rng, gi, g, hs, cs, rows, n%5 == 4)
		want := make([]float64, rows)
		gramTileGo(h, hs, gi, g, ci, cj, cs, rows, want)
		for r := 0; r < rows; r++ {
			exact := 0.0
			for j := 0; j < g; j++ {
				for i := 0; i < gi; i++ {
					exact += ci[i*cs+r] * h[i*hs+j] * cj[j*cs+r]
				}
			}
			scale := 0.0
			for j := 0; j < g; j++ {
				for i := 0; i < gi; i++ {
					scale += math.Abs(ci[i*cs+r] * h[i*hs+j] * cj[j*cs+r])
				}
			}
			if math.Abs(want[r]-exact) > 1e-12*scale {
				t.Fatalf("case %d (g %d, gi %d): row %d: reference %g, the sum %g", n, g, gi, r, want[r], exact)
			}
		}
		for _, path := range gramPaths() {
			got := make([]float64, rows)
			withGramPath(path, func() { gramTile(h, hs, gi, g, ci, cj, cs, rows, got) })
			for r := range got {
				if math.Float64bits(got[r]) != math.Float64bits(want[r]) {
					t.Fatalf("case %d (g %d, gi %d, hs %d, cs %d, rows %d), %s: row %d: %v (%#x), reference %v (%#x)",
						n, g, gi, hs, cs, rows, path, r, got[r], math.Float64bits(got[r]), want[r], math.Float64bits(want[r]))
				}
			}
		}
	}
}

// FuzzGramTile: the kernels and gramTileGo agree bit for bit on random block pairs.
func FuzzGramTile(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(32), uint8(32), uint8(4), false)
	f.Add(uint64(5), uint64(6), uint8(1), uint8(8), uint8(1), true)
	f.Add(uint64(9), uint64(4), uint8(7), uint8(64), uint8(2), false)
	f.Fuzz(func(t *testing.T, s1, s2 uint64, gi8, g8, tiles uint8, wide bool) {
		rng := rand.New(rand.NewPCG(s1, s2))
		g, gi, hs, rows, cs := fuzzTileShape(rng, gi8, g8, tiles)
		h, ci, cj := gramTileCase(rng, gi, g, hs, cs, rows, wide)
		want := make([]float64, rows)
		gramTileGo(h, hs, gi, g, ci, cj, cs, rows, want)
		for _, path := range gramPaths() {
			got := make([]float64, rows)
			withGramPath(path, func() { gramTile(h, hs, gi, g, ci, cj, cs, rows, got) })
			for r := range got {
				if math.Float64bits(got[r]) != math.Float64bits(want[r]) {
					t.Fatalf("g %d gi %d hs %d cs %d rows %d, %s: row %d: %v, reference %v", g, gi, hs, cs, rows, path, r, got[r], want[r])
				}
			}
		}
	})
}

// BenchmarkGramTile: one block pair of 32 x 32 for refitBlock rows, the block and codes in the L1
// cache, on each of gramTile's paths: 2·32·32 flops a row.
func BenchmarkGramTile(b *testing.B) {
	const g, rows = 32, refitBlock
	rng := rand.New(rand.NewPCG(1, 1))
	h, ci, cj := gramTileCase(rng, g, g, g, rows, rows, false)
	out := make([]float64, rows)
	for _, path := range gramPaths() {
		b.Run(path, func(b *testing.B) {
			withGramPath(path, func() {
				for range b.N {
					gramTile(h, g, g, g, ci, cj, rows, rows, out)
				}
			})
			b.ReportMetric(2*g*g*rows*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// TestMulTileMatchesReference: the product kernels give mulTileGo's outputs bit for bit, continuing
// from what y holds, for the widths, short blocks, strides and tiles of TestGramTileMatchesReference;
// and the reference is y + Σ c_i·h_ij.
func TestMulTileMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 5))
	for n := 0; n < 600; n++ {
		g, gi, hs, rows, cs := tileShape(rng, n)
		h, ci, y0 := gramTileCase(rng, gi, g, hs, cs, rows, n%5 == 4)
		want := append([]float64(nil), y0...)
		mulTileGo(h, hs, gi, g, ci, want, cs, rows)
		for r := 0; r < rows; r++ {
			for j := 0; j < g; j++ {
				exact, scale := y0[j*cs+r], math.Abs(y0[j*cs+r])
				for i := 0; i < gi; i++ {
					exact += ci[i*cs+r] * h[i*hs+j]
					scale += math.Abs(ci[i*cs+r] * h[i*hs+j])
				}
				if got := want[j*cs+r]; math.Abs(got-exact) > 1e-12*scale {
					t.Fatalf("case %d (g %d, gi %d): row %d column %d: reference %g, the sum %g", n, g, gi, r, j, got, exact)
				}
			}
		}
		for _, path := range gramPaths() {
			got := append([]float64(nil), y0...)
			withGramPath(path, func() { mulTile(h, hs, gi, g, ci, got, cs, rows) })
			for k := range got {
				if math.Float64bits(got[k]) != math.Float64bits(want[k]) {
					t.Fatalf("case %d (g %d, gi %d, hs %d, cs %d, rows %d), %s: y[%d] %v, reference %v", n, g, gi, hs, cs, rows, path, k, got[k], want[k])
				}
			}
		}
	}
}

// FuzzMulTile: the product kernels and mulTileGo agree bit for bit on random blocks.
func FuzzMulTile(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(32), uint8(32), uint8(4), false)
	f.Add(uint64(5), uint64(6), uint8(1), uint8(8), uint8(1), true)
	f.Fuzz(func(t *testing.T, s1, s2 uint64, gi8, g8, tiles uint8, wide bool) {
		rng := rand.New(rand.NewPCG(s1, s2))
		g, gi, hs, rows, cs := fuzzTileShape(rng, gi8, g8, tiles)
		h, ci, y0 := gramTileCase(rng, gi, g, hs, cs, rows, wide)
		want := append([]float64(nil), y0...)
		mulTileGo(h, hs, gi, g, ci, want, cs, rows)
		for _, path := range gramPaths() {
			got := append([]float64(nil), y0...)
			withGramPath(path, func() { mulTile(h, hs, gi, g, ci, got, cs, rows) })
			for k := range got {
				if math.Float64bits(got[k]) != math.Float64bits(want[k]) {
					t.Fatalf("g %d gi %d hs %d cs %d rows %d, %s: y[%d] %v, reference %v", g, gi, hs, cs, rows, path, k, got[k], want[k])
				}
			}
		}
	})
}

// TestTargetTimesHPaths: targetTimesH gives the same bits on every path of mulTile (the loop order
// fixes each sum), for K a multiple of the block width and not.
func TestTargetTimesHPaths(t *testing.T) {
	for _, k := range []int{96, 100} {
		_, hb, _, target := refitFixture(t, 40, k, 32, uint64(k))
		dead := make([]bool, k)
		dead[3] = true
		var want targetProducts
		withGramPath("go", func() {
			var err error
			if want, err = targetTimesH(context.Background(), target, hb, dead, 40, 2); err != nil {
				t.Fatal(err)
			}
		})
		for _, path := range gramPaths() {
			withGramPath(path, func() {
				got, err := targetTimesH(context.Background(), target, hb, dead, 40, 1)
				if err != nil {
					t.Fatal(err)
				}
				for i := range got.th {
					if math.Float64bits(got.th[i]) != math.Float64bits(want.th[i]) {
						t.Fatalf("k %d, %s: t·H[%d] %v, reference path %v", k, path, i, got.th[i], want.th[i])
					}
				}
				for i := range got.tht {
					if math.Float64bits(got.tht[i]) != math.Float64bits(want.tht[i]) {
						t.Fatalf("k %d, %s: tᵀHt[%d] %v, reference path %v", k, path, i, got.tht[i], want.tht[i])
					}
				}
			})
		}
	}
}
