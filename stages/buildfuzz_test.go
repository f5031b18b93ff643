package stages

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/ork/quant"
)

// validQWeight returns the bytes of a small valid finalized-weight file.
func validQWeight(t testing.TB) []byte {
	dir := t.TempDir()
	p := filepath.Join(dir, "w")
	q := &QWeight{Meta: QWeightMeta{Name: "blk.0.attn_q.weight", DType: "I4_NATIVE", Method: "rtn", N: 2, K: 32, KP: 32, Bits: 4,
		Group: 32, ActBits: 4, QErr: 0.1, Source: artifacts.SumBytes([]byte("x")).String()}, Codes: make([]int8, 64), Scales: []float32{1, 2}}
	for i := range q.Codes {
		q.Codes[i] = int8(i%16 - 8)
	}
	if err := WriteQWeight(p, q); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzReadQWeight: arbitrary bytes never panic ReadQWeight, and whatever it accepts has sizes that
// match its meta.
func FuzzReadQWeight(f *testing.F) {
	f.Add(validQWeight(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "w")
		os.WriteFile(p, data, 0o644)
		q, err := ReadQWeight(p)
		if err != nil {
			return
		}
		if len(q.Codes) != q.Meta.N*q.Meta.KP && len(q.F16) != q.Meta.N*q.Meta.K {
			t.Fatalf("accepted a weight whose payload does not match its meta: %+v", q.Meta)
		}
		// What it accepts writes and reads back as the same weight.
		again := filepath.Join(t.TempDir(), "again")
		if err := WriteQWeight(again, q); err != nil {
			t.Fatalf("an accepted weight does not write: %v", err)
		}
		q2, err := ReadQWeight(again)
		if err != nil || q2.Meta != q.Meta || !slices.Equal(q2.Codes, q.Codes) || !slices.Equal(q2.F16, q.F16) ||
			!slices.EqualFunc(q2.Scales, q.Scales, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Fatalf("an accepted weight reads back otherwise: %v", err)
		}
	})
}

// FuzzReadTokens: arbitrary bytes never panic ReadTokens; accepted files have the declared shape.
func FuzzReadTokens(f *testing.F) {
	p := filepath.Join(f.TempDir(), "tok")
	if err := writeTokens(p, [][]int32{{1, 5, 7}, {1, 9, 2}}, 3); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "tok")
		os.WriteFile(p, data, 0o644)
		seqs, err := ReadTokens(p)
		if err != nil {
			return
		}
		for _, s := range seqs {
			if len(s) != len(seqs[0]) {
				t.Fatal("ragged sequences accepted")
			}
		}
	})
}

// TestQWeightRoundTrip writes and reads a weight back, and refuses a flipped byte and a truncation.
func TestQWeightRoundTrip(t *testing.T) {
	b := validQWeight(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "ok")
	os.WriteFile(p, b, 0o644)
	q, err := ReadQWeight(p)
	if err != nil || q.Scales[1] != 2 || q.Meta.Rotation != (quant.Rotation{}) {
		t.Fatalf("round trip: %v %+v", err, q)
	}
	bad := append([]byte(nil), b...)
	bad[len(bad)-40] ^= 1
	os.WriteFile(filepath.Join(dir, "flip"), bad, 0o644)
	if _, err := ReadQWeight(filepath.Join(dir, "flip")); err == nil {
		t.Error("a flipped payload byte was accepted")
	}
	os.WriteFile(filepath.Join(dir, "short"), b[:len(b)-1], 0o644)
	if _, err := ReadQWeight(filepath.Join(dir, "short")); err == nil {
		t.Error("a truncated file was accepted")
	}
}

// TestQWeightNibbles: int4 codes round-trip two a byte (every value -8..7, an odd count with its
// padding nibble), an int8 weight a byte a code; the file is the packed size; a code outside -8..7
// is refused on write, and a padding nibble that is not 0 on read, even under a valid digest.
func TestQWeightNibbles(t *testing.T) {
	dir := t.TempDir()
	src := artifacts.SumBytes([]byte("x")).String()
	for _, tc := range []struct {
		dtype      string
		bits, n, k int
	}{{"I4_NATIVE", 4, 3, 33}, {"I4_NATIVE", 4, 2, 64}, {"I8", 8, 3, 33}} {
		m := QWeightMeta{Name: "blk.0.ffn_up.weight", DType: tc.dtype, Method: "rtn", N: tc.n, K: tc.k, KP: tc.k, Bits: tc.bits,
			Group: 32, ActBits: 8, Source: src}
		q := &QWeight{Meta: m, Codes: make([]int8, tc.n*tc.k), Scales: make([]float32, tc.n*m.Groups())}
		lo, span := -8, 16
		if tc.bits == 8 {
			lo, span = -128, 256
		}
		for i := range q.Codes {
			q.Codes[i] = int8(lo + (i*7)%span)
		}
		for i := range q.Scales {
			q.Scales[i] = float32(i) + 0.5
		}
		p := filepath.Join(dir, fmt.Sprintf("%s-%dx%d", tc.dtype, tc.n, tc.k))
		if err := WriteQWeight(p, q); err != nil {
			t.Fatal(err)
		}
		got, err := ReadQWeight(p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Codes, q.Codes) || !slices.Equal(got.Scales, q.Scales) {
			t.Fatalf("%s %dx%d: codes or scales differ after the round trip", tc.dtype, tc.n, tc.k)
		}
		b, _ := os.ReadFile(p)
		codes := tc.n * tc.k
		if tc.bits == 4 {
			codes = (codes + 1) / 2
		}
		if meta := int(binary.LittleEndian.Uint64(b[8:])); len(b) != 16+meta+codes+4*len(q.Scales)+32 {
			t.Errorf("%s %dx%d: %d bytes, want %d codes' bytes besides the header, scales and digest", tc.dtype, tc.n, tc.k, len(b), codes)
		}
		if tc.bits != 4 || tc.n*tc.k%2 == 0 {
			continue
		}
		// The padding nibble set, the digest recomputed: refused all the same.
		last := len(b) - 32 - 4*len(q.Scales) - 1
		b[last] |= 0x10
		h := artifacts.NewStreamHasher()
		h.Write(b[:len(b)-32])
		copy(b[len(b)-32:], artifacts.DigestOf(h).Bytes())
		bad := filepath.Join(dir, "pad")
		os.WriteFile(bad, b, 0o644)
		if _, err := ReadQWeight(bad); err == nil || !strings.Contains(err.Error(), "padding nibble") {
			t.Errorf("a set padding nibble: %v", err)
		}
		q.Codes[5] = 8
		if err := WriteQWeight(filepath.Join(dir, "range"), q); err == nil || !strings.Contains(err.Error(), "outside -8..7") {
			t.Errorf("an int4 code of 8 written: %v", err)
		}
	}
}
