package pack_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

// TestNegativeScalesRoundTrip: the format holds any finite float32 scale (orkpack.md 2.3), so int4 weights
// with negative scales (quant.WithNegativeScales) go through tile, write, read, untile, VerifyAll and
// Dequantize unchanged, with their signs, for every int4 dtype, grouped and per channel.
func TestNegativeScalesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	var ws []pack.Weight
	for _, dt := range []pack.DType{pack.I4Native, pack.I4, pack.I4RotA8} {
		for _, g := range []int{0, 32} {
			w := quantized(r, fmt.Sprintf("blk.%d.%s.g%d.weight", len(ws), dt, g), dt, 172, 70, g, tile.NibbleOrder(r.IntN(2)))
			for i := range w.Scales {
				if i%3 != 1 {
					w.Scales[i] = -w.Scales[i]
				}
			}
			ws = append(ws, w)
		}
	}
	ctx := context.Background()
	pr, err := pack.Open(ctx, writePack(t, t.TempDir(), ws))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.VerifyAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range ws {
		got, err := pr.Load(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		sameWeight(t, want, got)
		deq := got.Dequantize()
		g := want.Group
		if g == 0 {
			g = want.K
		}
		ng := want.Groups()
		for n := 0; n < want.N; n++ {
			for k := 0; k < want.K; k++ {
				if v := float32(want.Codes[n*want.K+k]) * want.Scales[n*ng+k/g]; deq[n*want.K+k] != v {
					t.Fatalf("%s [%d][%d]: dequantized %v, want code·scale %v", want.Name, n, k, deq[n*want.K+k], v)
				}
			}
		}
	}
}
