package stages

import (
	"os"
	"path/filepath"
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
