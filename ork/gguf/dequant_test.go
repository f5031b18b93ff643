package gguf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"orkpipe/internal/testfiles"
)

func openT(t testing.TB, name string) *File {
	t.Helper()
	f, err := Open(context.Background(), testfiles.Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readAll(t testing.TB, f *File, ti TensorInfo) []float32 {
	t.Helper()
	out := make([]float32, ti.Elements())
	if err := f.ReadRows(context.Background(), ti, 0, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDequantAgainstF32 checks every tensor of the quantized stories260K variants against the
// F32 original within the error its format permits, and that ggml's reference quantizers
// (re-implemented in Quantize) reproduce the files' Q8_0, Q4_0 and F16 bytes exactly.
func TestDequantAgainstF32(t *testing.T) {
	ref := openT(t, "stories260K.gguf")
	for _, file := range []string{"stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf", "stories260K-Q4_K_M.gguf"} {
		q := openT(t, file)
		checked := map[Type]int{}
		worstRel := map[Type]float64{} // max |error| / step (d for block types, |x| for F16)
		for _, qt := range q.Tensors {
			rt, err := ref.Tensor(qt.Name)
			if err != nil {
				t.Fatal(err)
			}
			want := readAll(t, ref, rt)
			got := readAll(t, q, qt)
			raw := make([]byte, qt.Size)
			if err := q.ReadRaw(context.Background(), qt, 0, raw); err != nil {
				t.Fatal(err)
			}
			bs, bb := qt.Type.BlockSize(), qt.Type.BlockBytes()
			for i := range want {
				blk := raw[i/bs*bb:]
				var bound float64
				switch qt.Type {
				case TypeF32:
					bound = 0
				case TypeF16:
					bound = math.Abs(float64(want[i]))*0x1p-11 + 0x1p-24
				case TypeQ8_0: // round-to-nearest of x/d with d = amax/127; d stored as f16
					d := math.Abs(float64(F16ToF32(binary.LittleEndian.Uint16(blk))))
					bound = d/2 + 127*d*0x1p-11
				case TypeQ4_0, TypeQ5_0: // d = max/-2^(b-1): the far end clamps, so up to one step
					d := math.Abs(float64(F16ToF32(binary.LittleEndian.Uint16(blk))))
					bound = d + 16*d*0x1p-11
				default:
					t.Fatalf("%s: %s: unexpected type %s", file, qt.Name, qt.Type)
				}
				e := math.Abs(float64(got[i]) - float64(want[i]))
				if e > bound*(1+1e-6) {
					t.Fatalf("%s: %s[%d]: |%g - %g| = %g exceeds the %s bound %g", file, qt.Name, i, got[i], want[i], e, qt.Type, bound)
				}
				var step float64
				switch qt.Type {
				case TypeQ8_0, TypeQ4_0, TypeQ5_0:
					step = math.Abs(float64(F16ToF32(binary.LittleEndian.Uint16(blk))))
				case TypeF16:
					step = math.Abs(float64(want[i]))
				}
				if step > 0 {
					worstRel[qt.Type] = max(worstRel[qt.Type], e/step)
				}
			}
			checked[qt.Type]++
			// Bit-exact re-quantization with ggml's reference algorithm.
			if CanQuantize(qt.Type) {
				re := make([]byte, qt.Size)
				if err := Quantize(qt.Type, want, re); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(re, raw) {
					t.Errorf("%s: %s: Quantize(%s) of the F32 original differs from llama-quantize's bytes", file, qt.Name, qt.Type)
				}
			}
		}
		t.Logf("%s: checked %v; worst |error|/scale %v", file, checked, worstRel)
	}
}

func f16bytes(x float32) []byte { return binary.LittleEndian.AppendUint16(nil, F32ToF16(x)) }

func TestDequantHandBuiltQ8_0Q4_0(t *testing.T) {
	// Q8_0: d = 0.5, qs = -128, -127, ..., -97
	blk := f16bytes(0.5)
	var want []float32
	for j := 0; j < 32; j++ {
		q := int8(-128 + j)
		blk = append(blk, byte(q))
		want = append(want, 0.5*float32(q))
	}
	got := make([]float32, 32)
	if err := Dequantize(TypeQ8_0, blk, got); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Q8_0", got, want)

	// Q4_0: d = -2; byte j holds element j (low nibble) and j+16 (high nibble); value (n-8)*d.
	blk = f16bytes(-2)
	want = make([]float32, 32)
	for j := 0; j < 16; j++ {
		lo, hi := byte(j), byte(15-j)
		blk = append(blk, lo|hi<<4)
		want[j] = float32(int(lo)-8) * -2
		want[j+16] = float32(int(hi)-8) * -2
	}
	if err := Dequantize(TypeQ4_0, blk, got); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Q4_0", got, want)

	// Q4_1: d = 0.25, m = -1; value n*d + m.
	blk = append(f16bytes(0.25), f16bytes(-1)...)
	for j := 0; j < 16; j++ {
		lo, hi := byte(j), byte((j*5)%16)
		blk = append(blk, lo|hi<<4)
		want[j] = float32(lo)*0.25 - 1
		want[j+16] = float32(hi)*0.25 - 1
	}
	if err := Dequantize(TypeQ4_1, blk, got); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Q4_1", got, want)

	// Q5_0 / Q5_1: 5-bit codes; bit 4 of element j is bit j of the little-endian u32 qh.
	codes := make([]int, 32)
	var qh uint32
	for j := range codes {
		codes[j] = (j*11 + 3) % 32
		if codes[j]&16 != 0 {
			qh |= 1 << j
		}
	}
	qs := make([]byte, 16)
	for j := 0; j < 16; j++ {
		qs[j] = byte(codes[j]&15) | byte(codes[j+16]&15)<<4
	}
	blk = append(append(f16bytes(1.5), binary.LittleEndian.AppendUint32(nil, qh)...), qs...)
	for j, c := range codes {
		want[j] = float32(c-16) * 1.5
	}
	if err := Dequantize(TypeQ5_0, blk, got); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Q5_0", got, want)
	blk = append(append(append(f16bytes(0.5), f16bytes(2)...), binary.LittleEndian.AppendUint32(nil, qh)...), qs...)
	for j, c := range codes {
		want[j] = float32(c)*0.5 + 2
	}
	if err := Dequantize(TypeQ5_1, blk, got); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Q5_1", got, want)
}

// packScalesK4 is the inverse of get_scale_min_k4: eight 6-bit scales and mins into 12 bytes.
func packScalesK4(sc, m [8]uint8) []byte {
	b := make([]byte, 12)
	for s := 0; s < 4; s++ {
		b[s] = sc[s] | (sc[s+4]>>4)<<6
		b[s+4] = m[s] | (m[s+4]>>4)<<6
		b[s+8] = sc[s+4]&0xF | (m[s+4]&0xF)<<4
	}
	return b
}

func TestDequantHandBuiltKQuants(t *testing.T) {
	sc := [8]uint8{1, 63, 17, 32, 5, 48, 33, 62} // upper half exercises the split 6-bit packing
	m := [8]uint8{0, 7, 63, 16, 40, 3, 59, 21}
	const d, dmin = float32(0.5), float32(0.25)
	code := func(i int) int { return (i*7 + i/32) % 32 }

	// Q4_K: sub-block s (32 elements) uses nibble (s odd: high) of qs[(s/2)*32 + e].
	q4 := append(append(f16bytes(d), f16bytes(dmin)...), packScalesK4(sc, m)...)
	qs := make([]byte, 128)
	want := make([]float32, 256)
	for i := 0; i < 256; i++ {
		s, e, c := i/32, i%32, code(i)%16
		if s%2 == 0 {
			qs[(s/2)*32+e] |= byte(c)
		} else {
			qs[(s/2)*32+e] |= byte(c) << 4
		}
		want[i] = d*float32(sc[s])*float32(c) - dmin*float32(m[s])
	}
	q4 = append(q4, qs...)
	got := make([]float32, 256)
	if err := Dequantize(TypeQ4_K, q4, got); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Q4_K", got, want)

	// Q5_K: as Q4_K plus bit 4 of element e of sub-block s in bit s of qh[e].
	qh := make([]byte, 32)
	qs = make([]byte, 128)
	for i := 0; i < 256; i++ {
		s, e, c := i/32, i%32, code(i)
		if s%2 == 0 {
			qs[(s/2)*32+e] |= byte(c & 15)
		} else {
			qs[(s/2)*32+e] |= byte(c&15) << 4
		}
		if c&16 != 0 {
			qh[e] |= 1 << s
		}
		want[i] = d*float32(sc[s])*float32(c) - dmin*float32(m[s])
	}
	q5 := append(append(append(append(f16bytes(d), f16bytes(dmin)...), packScalesK4(sc, m)...), qh...), qs...)
	if err := Dequantize(TypeQ5_K, q5, got); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Q5_K", got, want)

	// Q6_K: element i = 128n + 32quarter + l; low nibble in ql[64n + l + 32(quarter&1)]
	// (high nibble for quarter >= 2), two high bits at bit 2*quarter of qh[32n + l],
	// int8 scale sc[i/16]; value d * scale * (q - 32).
	ql, qh6, sc6 := make([]byte, 128), make([]byte, 64), make([]byte, 16)
	for k := range sc6 {
		sc6[k] = byte(int8(k*9 - 70))
	}
	for i := 0; i < 256; i++ {
		n, quarter, l := i/128, (i%128)/32, i%32
		q := (i*13 + 5) % 64
		idx := 64*n + l + 32*(quarter&1)
		if quarter < 2 {
			ql[idx] |= byte(q & 15)
		} else {
			ql[idx] |= byte(q&15) << 4
		}
		qh6[32*n+l] |= byte(q>>4) << (2 * quarter)
		want[i] = d * float32(int8(sc6[i/16])) * float32(q-32)
	}
	q6 := append(append(append(ql, qh6...), sc6...), f16bytes(d)...)
	if err := Dequantize(TypeQ6_K, q6, got); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Q6_K", got, want)
}

func assertEqual(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: element %d = %g, want %g", what, i, got[i], want[i])
		}
	}
}

func TestHalfConversions(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if f != f { // NaN
			if back := F32ToF16(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, back)
			}
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("F16 %#04x -> %g -> %#04x", h, f, back)
		}
		if b := F32ToBF16(BF16ToF32(uint16(h))); b != uint16(h) && BF16ToF32(uint16(h)) == BF16ToF32(uint16(h)) {
			t.Fatalf("BF16 %#04x round trip -> %#04x", h, b)
		}
	}
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3c00}, {65504, 0x7bff}, {65520, 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{0x1p-24, 0x0001}, {0x1p-25, 0x0000}, {0x1.8p-25, 0x0001}, {1 + 0x1p-11, 0x3c00}, {1 + 0x1.8p-10, 0x3c02},
	}
	for _, c := range cases {
		if got := F32ToF16(c.f); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	if got := F32ToBF16(1 + 0x1p-8); got != 0x3f80 { // tie rounds to even
		t.Errorf("F32ToBF16 tie = %#04x", got)
	}
	if got := F32ToBF16(1 + 0x1.8p-8); got != 0x3f81 {
		t.Errorf("F32ToBF16 above tie = %#04x", got)
	}
}

// TestDequantizeF16EveryHalf: Dequantize of F16 gives F16ToF32's bits for every half — through the
// F16C kernel where this CPU has one (blocks of eight finite values) and the table (Inf, NaN with its
// payload, tails) — at every start offset and length around the kernel's block of eight; and the same
// without the kernel.
func TestDequantizeF16EveryHalf(t *testing.T) {
	src := make([]byte, 2<<16)
	for h := range 1 << 16 {
		binary.LittleEndian.PutUint16(src[2*h:], uint16(h))
	}
	check := func(what string, src []byte, dst []float32) {
		t.Helper()
		for i, f := range dst {
			h := binary.LittleEndian.Uint16(src[2*i:])
			if math.Float32bits(f) != math.Float32bits(f16ToF32Slow(h)) {
				t.Fatalf("%s: half %#04x -> %#08x, want %#08x", what, h, math.Float32bits(f), math.Float32bits(f16ToF32Slow(h)))
			}
		}
	}
	kernel := hasF16C
	defer func() { hasF16C = kernel }()
	for _, k := range []bool{kernel, false} {
		hasF16C = k
		dst := make([]float32, 1<<16)
		if err := Dequantize(TypeF16, src, dst); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("kernel %v, all halves", k), src, dst)
		// Offsets and lengths around a block of eight, over finite values with an Inf or NaN between.
		for _, at := range []int{0x3c00, 0x7bf0, 0x7c00 - 5, 0x7e00, 0xfbf3} {
			for off := range 9 {
				for n := range 27 {
					part := src[2*(at+off) : 2*(at+off+n)]
					dst := make([]float32, n)
					if err := Dequantize(TypeF16, part, dst); err != nil {
						t.Fatal(err)
					}
					check(fmt.Sprintf("kernel %v, %d halves from %#04x", k, n, at+off), part, dst)
				}
			}
		}
	}
	if !kernel {
		t.Log("this CPU has no F16C/AVX2: only the table was checked")
	}
}

func TestDequantizeUnsupported(t *testing.T) {
	f := openT(t, "stories260K.gguf")
	ti, _ := f.Tensor("output.weight")
	ti.Type = TypeQ2_K
	err := f.ReadRows(context.Background(), ti, 0, make([]float32, 64))
	if !errors.Is(err, ErrUnsupportedType) || !bytes.Contains([]byte(err.Error()), []byte(`"output.weight" has type Q2_K`)) {
		t.Errorf("err = %v", err)
	}
	if err := Dequantize(TypeQ8_0, make([]byte, 33), make([]float32, 32)); !errors.Is(err, ErrFormat) {
		t.Errorf("short block: %v", err)
	}
}

func TestReadRowsStreamsRows(t *testing.T) {
	f := openT(t, "stories260K-Q8_0.gguf")
	ti, _ := f.Tensor("token_embd.weight")
	all := readAll(t, f, ti)
	row := make([]float32, ti.RowLen())
	for _, r := range []int64{0, 1, 255, ti.Rows() - 1} {
		if err := f.ReadRows(context.Background(), ti, r, row); err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "row", row, all[r*ti.RowLen():(r+1)*ti.RowLen()])
	}
	if err := f.ReadRows(context.Background(), ti, ti.Rows(), row); err == nil {
		t.Error("row past the end: no error")
	}
}
