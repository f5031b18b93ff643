package quant

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// TestGGMLBitExact re-quantizes every F32 tensor of stories260K.gguf that llama.cpp stored as
// Q8_0 or Q4_0 in the quantized testdata files and compares the blocks byte for byte.
func TestGGMLBitExact(t *testing.T) {
	ctx := context.Background()
	src, err := gguf.Open(ctx, testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	cases := []struct {
		file  string
		typ   gguf.Type
		quant func([]byte, []float32) error
	}{
		{"stories260K-Q8_0.gguf", gguf.TypeQ8_0, QuantizeQ8_0},
		{"stories260K-Q4_0.gguf", gguf.TypeQ4_0, QuantizeQ4_0},
		// Q4_K_M: every tensor fell back to other types (rows of 64/172 are not multiples of
		// 256); its Q8_0 tensors are checked here too.
		{"stories260K-Q4_K_M.gguf", gguf.TypeQ8_0, QuantizeQ8_0},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			qf, err := gguf.Open(ctx, testfiles.Path(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer qf.Close()
			checked, blocks := 0, 0
			for _, ti := range qf.Tensors {
				if ti.Type != tc.typ {
					continue
				}
				st, err := src.Tensor(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				if st.Type != gguf.TypeF32 {
					t.Fatalf("%s: source type %v, want F32", ti.Name, st.Type)
				}
				x := make([]float32, st.Elements())
				if err := src.ReadRows(ctx, st, 0, x); err != nil {
					t.Fatal(err)
				}
				want := make([]byte, ti.Size)
				if err := qf.ReadRaw(ctx, ti, 0, want); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, ti.Size)
				if err := tc.quant(got, x); err != nil {
					t.Fatalf("%s: %v", ti.Name, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s (%v): %s", ti.Name, tc.typ, firstBlockDiff(got, want, tc.typ))
				}
				checked++
				blocks += len(x) / 32
			}
			if checked == 0 {
				t.Fatalf("%s has no %v tensors", tc.file, tc.typ)
			}
			t.Logf("%s: %d %v tensors, %d blocks byte-identical", tc.file, checked, tc.typ, blocks)
		})
	}
}

func firstBlockDiff(got, want []byte, typ gguf.Type) string {
	bs := typ.BlockBytes()
	for i := 0; i+bs <= len(got); i += bs {
		if !bytes.Equal(got[i:i+bs], want[i:i+bs]) {
			return fmt.Sprintf("block %d differs:\n got  %x\n want %x", i/bs, got[i:i+bs], want[i:i+bs])
		}
	}
	return "length differs"
}

func TestGGMLRoundTripBounds(t *testing.T) {
	g := newRNG(3)
	x := make([]float32, 4*QKK)
	for i := range x {
		x[i] = float32(g.norm())
	}
	x[5] = 9 // an outlier in the first block
	type codec struct {
		name       string
		blockBytes int
		qk         int
		enc        func([]byte, []float32) error
		dec        func([]float32, []byte) error
		maxStep    float64 // bound on |x - x̂| in units of the block's amax
	}
	for _, c := range []codec{
		{"Q8_0", BlockQ8_0, QK8_0, QuantizeQ8_0, DequantizeQ8_0, 0.5/127 + 1e-3},
		// the value opposite in sign to the block max clamps at code 7: up to amax/8 off
		{"Q4_0", BlockQ4_0, QK4_0, QuantizeQ4_0, DequantizeQ4_0, 1.0/8 + 1e-3},
		{"Q4_K", BlockQ4K, QKK, QuantizeQ4K, DequantizeQ4K, 2.0 / 15},
	} {
		enc := make([]byte, len(x)/c.qk*c.blockBytes)
		if err := c.enc(enc, x); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := c.dec(y, enc); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < len(x)/c.qk; b++ {
			amax := 0.0
			for _, v := range x[b*c.qk : (b+1)*c.qk] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			for i := b * c.qk; i < (b+1)*c.qk; i++ {
				if d := math.Abs(float64(x[i] - y[i])); d > c.maxStep*amax {
					t.Errorf("%s: element %d: |%v - %v| = %v > %v·amax(%v)", c.name, i, x[i], y[i], d, c.maxStep, amax)
				}
			}
		}
		if err := c.enc(enc[:1], x); err == nil {
			t.Errorf("%s: short destination accepted", c.name)
		}
		if err := c.enc(make([]byte, c.blockBytes), x[:c.qk-1]); err == nil {
			t.Errorf("%s: partial block accepted", c.name)
		}
	}
}

func TestFP16(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, // rounds to inf
		{5.960464477539063e-08, 0x0001}, {2.9802322387695312e-08, 0}, // half the smallest subnormal: ties to even (0)
		{1.0009765625, 0x3c01}, {1.00048828125, 0x3c00}, // tie -> even
		{1.00146484375, 0x3c02}, // tie -> even (up)
		{float32(math.Inf(-1)), 0xfc00},
	} {
		if got := FP32ToFP16(tc.f); got != tc.h {
			t.Errorf("FP32ToFP16(%v) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	// Every finite half round-trips, and agrees with ork/gguf's independent conversion.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		f := FP16ToFP32(uint16(h))
		if f != gguf.F16ToF32(uint16(h)) {
			t.Fatalf("FP16ToFP32(%#04x) = %v, gguf says %v", h, f, gguf.F16ToF32(uint16(h)))
		}
		if back := FP32ToFP16(f); back != uint16(h) && !(f == 0 && back&0x7fff == 0) {
			t.Fatalf("half %#04x -> %v -> %#04x", h, f, back)
		}
	}
	g := newRNG(9)
	for i := 0; i < 200000; i++ {
		f := math.Float32frombits(uint32(g.next()))
		if f != f {
			continue
		}
		if a, b := FP32ToFP16(f), gguf.F32ToF16(f); a != b {
			t.Fatalf("FP32ToFP16(%v) = %#04x, gguf.F32ToF16 = %#04x", f, a, b)
		}
	}
}

// TestQ4KLayoutAgreesWithGGUF: there is no llama.cpp-written Q4_K tensor in the test data (rows
// of 64 and 172 fall back to other types), so the block layout is checked against ork/gguf's
// independent ggml dequantizer: both decoders give the same values for our encoded blocks.
func TestQ4KLayoutAgreesWithGGUF(t *testing.T) {
	g := newRNG(17)
	x := make([]float32, 8*QKK)
	for i := range x {
		x[i] = float32(g.norm()) * float32(1+i%7)
	}
	enc := make([]byte, len(x)/QKK*BlockQ4K)
	if err := QuantizeQ4K(enc, x); err != nil {
		t.Fatal(err)
	}
	mine := make([]float32, len(x))
	if err := DequantizeQ4K(mine, enc); err != nil {
		t.Fatal(err)
	}
	theirs := make([]float32, len(x))
	if err := gguf.Dequantize(gguf.TypeQ4_K, enc, theirs); err != nil {
		t.Fatal(err)
	}
	for i := range mine {
		if math.Abs(float64(mine[i]-theirs[i])) > 1e-6*(1+math.Abs(float64(theirs[i]))) {
			t.Fatalf("value %d: quant decodes %v, gguf %v", i, mine[i], theirs[i])
		}
	}
	if rel := relErr32(mine, x); rel > 0.1 {
		t.Errorf("Q4_K relative error %v", rel)
	}
}
