package model

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"orkpipe/internal/testfiles"
)

// preSplit pre-tokenizes text with the pre-tokenizer tokenizer.ggml.pre names.
func preSplit(t *testing.T, pre, text string) []string {
	t.Helper()
	o, err := preOptionsFor(pre)
	if err != nil {
		t.Fatal(err)
	}
	pt, norm, err := prepareText(text)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	off, c := 0, 0
	for _, n := range o.spec.split(pt) {
		end := off
		for _, r := range pt.cpts[c : c+n] {
			end += cptLen(r)
		}
		out = append(out, norm[off:end])
		off, c = end, c+n
	}
	return out
}

// TestPreTokenizers checks the splits against what the regular expressions (with lookahead) give,
// worked out by hand for one input exercising every alternative.
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
		{"tekken", []string{"Hello", " world", " ", "1", "2", "3", "4", "5", "!!\n\n", " ", " x", " I", "'M", " don", "'t"}},
		{"gpt-4o", []string{"Hello", " world", " ", "123", "45", "!!\n\n", " ", " x", " I'M", " don't"}},
	} {
		if got := preSplit(t, c.pre, in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.pre, got, c.want)
		}
	}
	if _, err := preOptionsFor("no-such-pre"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown pre-tokenizer: %v, want ErrUnsupported", err)
	}
}

// pretokGolden is testdata/pretok/golden.json.gz: llama.cpp's own splits (unicode_regex_split with
// each LLAMA_VOCAB_PRE_TYPE's regex set, from src/unicode.cpp at the commit in its llama_cpp field) of
// 379 inputs: the test vectors of llama.cpp's models/ggml-vocab-*.gguf.inp, hand-written edge cases and
// seeded random strings over code points of every category llama.cpp distinguishes (and invalid
// UTF-8). It was recorded with a small harness linked against that llama.cpp source, which is not kept
// here (no code built from llama.cpp is committed).
type pretokGolden struct {
	LlamaCpp string             `json:"llama_cpp"`
	Inputs   [][]byte           `json:"inputs"`
	Splits   map[string][][]int `json:"splits"` // "TYPE,TYPE,...": per input, code point lengths; null where llama.cpp throws
}

func readPretokGolden(t testing.TB) pretokGolden {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "pretok", "golden.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var g pretokGolden
	if err := json.NewDecoder(z).Decode(&g); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestPreTokenizerGolden checks every pre-tokenizer type against llama.cpp's splits, and that the
// table covers every type llama.cpp's llm_tokenizer_bpe knows.
func TestPreTokenizerGolden(t *testing.T) {
	g := readPretokGolden(t)
	seen := map[string]bool{}
	for labels, splits := range g.Splits {
		for _, name := range strings.Split(labels, ",") {
			seen[name] = true
			spec := preSpecs()[name]
			if spec == nil {
				t.Errorf("pre-tokenizer type %s (llama.cpp %s): not in preSpecs()", name, g.LlamaCpp)
				continue
			}
			bad := 0
			for i, want := range splits {
				if want == nil {
					continue // llama.cpp throws (only for an empty text, which tokenization never passes)
				}
				pt, _, err := prepareText(string(g.Inputs[i]))
				if err != nil {
					t.Fatalf("%s input %d: %v", name, i, err)
				}
				if got := spec.split(pt); !slices.Equal(got, want) {
					if bad++; bad <= 3 {
						t.Errorf("%s input %d %q:\n got %v\nwant %v", name, i, g.Inputs[i], got, want)
					}
				}
			}
			if bad > 3 {
				t.Errorf("%s: %d of %d inputs differ", name, bad, len(splits))
			}
		}
	}
	for name := range preSpecs() {
		if !seen[name] && name != "CHATGLM3" && name != "LLAMA4" && name != "PIXTRAL" { // the default, by llama.cpp's switch
			t.Errorf("preSpecs() has %s, which llama.cpp's regex table does not", name)
		}
	}
	if len(seen) != 54 {
		t.Errorf("golden covers %d pre-tokenizer types, want 54", len(seen))
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

// FuzzPreTokenize runs every pre-tokenizer type on arbitrary text: no panic, pieces non-empty and
// in order, and together they spell the text (as llama.cpp re-encodes it: invalid bytes as U+FFFD).
func FuzzPreTokenize(f *testing.F) {
	for _, s := range []string{"", "Hello world 12345!!\n\n  x I'M don't", " \u00a0\u3000x\r\n\ty", "e\u0301\u0308 \u0915\u093e",
		"中文 ひらがな 한국어 ㄅ", "<sentinel:7>IMGIMGABZ", "1234567", "\xff\xc3(\xe2\x82", "\xc0\x80\xed\xa0\x80"} {
		f.Add(s)
	}
	if b, err := os.ReadFile(testfiles.Path(f, "ggml-vocab-gpt-2.gguf.inp")); err == nil {
		for _, s := range strings.Split(string(b), "\n__ggml_vocab_test__\n") {
			f.Add(s)
		}
	}
	names := make([]string, 0, len(preSpecs()))
	for n := range preSpecs() {
		names = append(names, n)
	}
	slices.Sort(names)
	f.Fuzz(func(t *testing.T, s string) {
		pt, norm, err := prepareText(s)
		if err != nil {
			if !errors.Is(err, ErrBadText) {
				t.Fatalf("prepareText: %v", err)
			}
			return
		}
		if utf8.ValidString(s) && norm != s {
			t.Fatalf("valid text re-encoded as %q", norm)
		}
		for _, name := range names {
			var b strings.Builder
			off, c := 0, 0
			for _, n := range preSpecs()[name].split(pt) {
				if n <= 0 || c+n > len(pt.cpts) {
					t.Fatalf("%s: piece of %d code points at %d of %d", name, n, c, len(pt.cpts))
				}
				end := off
				for _, r := range pt.cpts[c : c+n] {
					end += cptLen(r)
				}
				b.WriteString(norm[off:end])
				off, c = end, c+n
			}
			if b.String() != norm {
				t.Fatalf("%s: pieces spell %q, want %q", name, b.String(), norm)
			}
		}
	})
}
