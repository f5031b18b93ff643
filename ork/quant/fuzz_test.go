package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"orkpipe/ork/gguf"
)

// FuzzGGMLQuantizers feeds arbitrary float32 blocks (NaN, Inf and magnitudes outside
// [1e-30, 1e30] zeroed: there llama.cpp's 1/d overflows and its float-to-int conversions are
// undefined behaviour) to QuantizeQ8_0/QuantizeQ4_0 and checks them
// against ork/gguf's independent implementation of the same reference quantizers, and Q4_K for
// its decode bound. Seeds are in testdata/fuzz/FuzzGGMLQuantizers.
func FuzzGGMLQuantizers(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0, 0, 0x80, 0x3f}, 32)) // all 1.0
	f.Add(make([]byte, 128))
	f.Fuzz(func(t *testing.T, raw []byte) {
		n := len(raw) / 4 / 32 * 32
		if n == 0 || n > 4096 {
			return
		}
		x := make([]float32, n)
		for i := range x {
			v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			if v != v || math.IsInf(float64(v), 0) || math.Abs(float64(v)) > 1e30 || math.Abs(float64(v)) < 1e-30 {
				v = 0
			}
			x[i] = v
		}
		for _, c := range []struct {
			typ gguf.Type
			bb  int
			enc func([]byte, []float32) error
		}{{gguf.TypeQ8_0, BlockQ8_0, QuantizeQ8_0}, {gguf.TypeQ4_0, BlockQ4_0, QuantizeQ4_0}} {
			mine := make([]byte, n/32*c.bb)
			theirs := make([]byte, n/32*c.bb)
			if err := c.enc(mine, x); err != nil {
				t.Fatal(err)
			}
			if err := gguf.Quantize(c.typ, x, theirs); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mine, theirs) {
				t.Fatalf("%v: quant and gguf disagree: %s", c.typ, firstBlockDiff(mine, theirs, c.typ))
			}
		}
		amax := 0.0
		for _, v := range x {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		// Q4_K's super-block scales are fp16: beyond its range llama.cpp stores Inf and decodes
		// NaN too, so the decode check covers values whose scales fit.
		if n%QKK == 0 && amax < 6e4 {
			enc := make([]byte, n/QKK*BlockQ4K)
			if err := QuantizeQ4K(enc, x); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, n)
			if err := DequantizeQ4K(y, enc); err != nil {
				t.Fatal(err)
			}
			for i, v := range y {
				if v != v {
					t.Fatalf("Q4_K decoded NaN at %d", i)
				}
			}
		}
	})
}
