package pack_test

import (
	"math"
	"testing"

	"orkpipe/ork/pack"
)

func TestDequantize(t *testing.T) {
	w := pack.Weight{
		Meta:   pack.Meta{Name: "w", DType: pack.I4Native, K: 40, N: 2, Group: 32},
		Codes:  make([]int8, 80),
		Scales: []float32{0.5, 2, -1, 0.25}, // [N=2][groups=2]
	}
	for i := range w.Codes {
		w.Codes[i] = int8(i%16 - 8)
	}
	got := w.Dequantize()
	for n := 0; n < 2; n++ {
		for k := 0; k < 40; k++ {
			want := float32(w.Codes[n*40+k]) * w.Scales[n*2+k/32]
			if got[n*40+k] != want {
				t.Fatalf("w[%d][%d] = %v, want %v", n, k, got[n*40+k], want)
			}
		}
	}
	half := map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x3555: 0.33325195, 0x0001: 1.0 / (1 << 24), 0x8001: -1.0 / (1 << 24),
		0x7bff: 65504, 0x0000: 0, 0x03ff: 1023.0 / (1 << 24)}
	for h, want := range half {
		if got := pack.HalfToFloat(h); got != want {
			t.Errorf("HalfToFloat(%#04x) = %v, want %v", h, got, want)
		}
	}
	if !math.IsInf(float64(pack.HalfToFloat(0x7c00)), 1) || !math.IsNaN(float64(pack.HalfToFloat(0x7e00))) {
		t.Error("HalfToFloat: inf/nan")
	}
	f := pack.Weight{Meta: pack.Meta{Name: "f", DType: pack.F16, K: 2, N: 1}, F16: []uint16{0x3c00, 0xc000}}
	if g := f.Dequantize(); g[0] != 1 || g[1] != -2 {
		t.Errorf("F16 dequantize: %v", g)
	}
}
