package model

import (
	"math"
	"reflect"
	"testing"
)

// TestPreTokenizers checks the hand-written splits against what the regular expressions (with
// lookahead) give, worked out by hand for one input exercising every alternative.
func TestPreTokenizers(t *testing.T) {
	const in = "Hello world 12345!!\n\n  x I'M don't"
	for _, c := range []struct {
		pre  string
		want []string
	}{
		{"gpt-2", []string{"Hello", " world", " 12345", "!!", "\n\n ", " x", " I", "'", "M", " don", "'t"}},
		{"llama3", []string{"Hello", " world", " ", "123", "45", "!!\n\n", " ", " x", " I", "'M", " don", "'t"}},
		{"qwen2", []string{"Hello", " world", " ", "1", "2", "3", "4", "5", "!!\n\n", " ", " x", " I", "'M", " don", "'t"}},
		{"default", []string{"Hello", " world", " ", "123", "45", "!!", "\n\n ", " x", " I", "'", "M", " don", "'", "t"}},
	} {
		split, _, err := preTokenizerFor(c.pre)
		if err != nil {
			t.Fatal(err)
		}
		if got := split(in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.pre, got, c.want)
		}
	}
	if _, _, err := preTokenizerFor("no-such-pre"); err == nil {
		t.Error("unknown pre-tokenizer accepted")
	}
}

// TestRoPEKinds: neox RoPE on a head equals normal (interleaved) RoPE on the head with its halves
// interleaved — the permutation llama.cpp's converter applies to llama's Q/K.
func TestRoPEKinds(t *testing.T) {
	c := Config{RopeDim: 8, RopeBase: 10000, RopeFreqScale: 1}
	const hd, pos = 8, 7
	x := []float32{0.3, -1.2, 0.7, 2.0, -0.4, 0.9, 1.5, -0.6}
	row := make([]float32, (pos+1)*hd) // positions 0..pos, rotate only the last
	copy(row[pos*hd:], x)
	c.RopeNeox = true
	neox := append([]float32(nil), row...)
	newRoPE(&c, pos+1).apply(neox, 1, hd)
	perm := make([]float32, len(row)) // (i, i+4) -> (2i, 2i+1)
	for i := 0; i < 4; i++ {
		perm[pos*hd+2*i], perm[pos*hd+2*i+1] = x[i], x[i+4]
	}
	c.RopeNeox = false
	newRoPE(&c, pos+1).apply(perm, 1, hd)
	for i := 0; i < 4; i++ {
		if math.Abs(float64(neox[pos*hd+i]-perm[pos*hd+2*i])) > 1e-6 || math.Abs(float64(neox[pos*hd+i+4]-perm[pos*hd+2*i+1])) > 1e-6 {
			t.Fatalf("pair %d: neox (%v, %v), normal on permuted (%v, %v)", i, neox[pos*hd+i], neox[pos*hd+i+4], perm[pos*hd+2*i], perm[pos*hd+2*i+1])
		}
	}
}

// TestRoPEFreqFactors: a frequency factor f for pair i rotates that pair as position p/f would.
func TestRoPEFreqFactors(t *testing.T) {
	c := Config{RopeDim: 4, RopeBase: 10000, RopeFreqScale: 1, RopeFreqFactors: []float32{1, 4}}
	plain := Config{RopeDim: 4, RopeBase: 10000, RopeFreqScale: 1}
	ff := newRoPE(&c, 9)
	pl := newRoPE(&plain, 9)
	// pair 1 at position 8 with factor 4 equals pair 1 at position 2 without.
	if math.Abs(float64(ff.cos[8*2+1]-pl.cos[2*2+1])) > 1e-6 || math.Abs(float64(ff.sin[8*2+1]-pl.sin[2*2+1])) > 1e-6 {
		t.Fatalf("factor 4 at position 8: (%v, %v), plain at 2: (%v, %v)", ff.cos[17], ff.sin[17], pl.cos[5], pl.sin[5])
	}
	if ff.cos[8*2] != pl.cos[8*2] {
		t.Fatal("factor 1 changed pair 0")
	}
}
