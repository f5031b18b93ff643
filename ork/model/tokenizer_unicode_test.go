package model

import (
	"testing"
	"unicode/utf8"
)

// TestCodepointTablesDigest pins the code point flags, lowercase mapping and NFD heads to llama.cpp's
// unicode-data.cpp at the reference commit (its digest, computed by the same FNV-1a walk over
// llama.cpp's unicode_cpt_flags_from_cpt, unicode_tolower and unicode_cpts_normalize_nfd). A Go
// release with newer Unicode tables changes the digest: then the 15.1 additions in
// tokenizer_unicode.go need review.
func TestCodepointTablesDigest(t *testing.T) {
	const llamaDigest = 0x5a55170d402d99cd
	h := uint64(0xcbf29ce484222325)
	put := func(v uint32, n int) {
		for i := 0; i < n; i++ {
			h ^= uint64(v>>(8*i)) & 0xFF
			h *= 0x100000001b3
		}
	}
	for c := rune(0); c < maxCodepoint; c++ {
		put(uint32(flagsOf(c)), 2)
		put(uint32(toLower(c)), 4)
		put(uint32(nfdFirstOf(c)), 4)
	}
	if h != llamaDigest {
		t.Fatalf("code point tables digest %016x, llama.cpp's is %016x", h, uint64(llamaDigest))
	}
}

// TestDecodeCpt checks llama.cpp's lenient UTF-8 decoding against hand-worked cases.
func TestDecodeCpt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want rune
		n    int
	}{
		{"a", 'a', 1},
		{"é", 'é', 2},
		{"\xC0\x80", 0, 2},                // overlong NUL: accepted
		{"\xED\xA0\x80", 0xD800, 3},       // surrogate: accepted
		{"\xF4\x90\x80\x80", 0x110000, 4}, // beyond Unicode: decoded (encoding it fails later)
		{"\x80", utf8.RuneError, 1},
		{"\xC3", utf8.RuneError, 1},
		{"\xE2\x82", utf8.RuneError, 1},
		{"\xF8\x88\x80\x80", utf8.RuneError, 1},
	} {
		r, n := decodeCpt(c.in, 0)
		if r != c.want || n != c.n {
			t.Errorf("%q: (%U, %d), want (%U, %d)", c.in, r, n, c.want, c.n)
		}
	}
}
