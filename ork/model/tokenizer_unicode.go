package model

import (
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Code point data as llama.cpp's unicode.cpp and unicode-data.cpp define it, derived from Go's unicode
// tables (Unicode 15.0) plus the characters Unicode 15.1 added (llama.cpp's tables are 15.1). The digest
// test in tokenizer_unicode_test.go pins the result to llama.cpp's table at the reference commit.

// cpFlags are llama.cpp's unicode_cpt_flags bits: one general-category bit, plus cpWhitespace.
type cpFlags uint16

const (
	cpUndefined  cpFlags = 0x0001 // Cn
	cpNumber     cpFlags = 0x0002 // \p{N}
	cpLetter     cpFlags = 0x0004 // \p{L}
	cpSeparator  cpFlags = 0x0008 // \p{Z}
	cpMark       cpFlags = 0x0010 // \p{M}
	cpPunct      cpFlags = 0x0020 // \p{P}
	cpSymbol     cpFlags = 0x0040 // \p{S}
	cpControl    cpFlags = 0x0080 // \p{C} except Cn
	cpWhitespace cpFlags = 0x0100 // llama.cpp's \s: the White_Space property
)

// maxCodepoint bounds the table; llama.cpp's decoder can produce larger values (up to 0x1FFFFF from
// a 4-byte sequence), which are cpUndefined.
const maxCodepoint = 0x110000

var cpTable = sync.OnceValue(func() []cpFlags {
	t := make([]cpFlags, maxCodepoint)
	for i := range t {
		t[i] = cpUndefined
	}
	fill := func(flag cpFlags, tabs ...*unicode.RangeTable) {
		for _, tab := range tabs {
			for _, r := range tab.R16 {
				for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
					t[c] = flag
				}
			}
			for _, r := range tab.R32 {
				for c := r.Lo; c <= r.Hi; c += r.Stride {
					t[c] = flag
				}
			}
		}
	}
	fill(cpControl, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
	fill(cpLetter, unicode.L)
	fill(cpMark, unicode.M)
	fill(cpNumber, unicode.N)
	fill(cpPunct, unicode.P)
	fill(cpSymbol, unicode.S)
	fill(cpSeparator, unicode.Z)
	// Unicode 15.1: four ideographic description characters, one CJK stroke, CJK extension I.
	for c := 0x2FFC; c <= 0x2FFF; c++ {
		t[c] = cpSymbol
	}
	t[0x31EF] = cpSymbol
	for c := 0x2EBF0; c <= 0x2EE5D; c++ {
		t[c] = cpLetter
	}
	for _, c := range whitespaceCpts {
		t[c] |= cpWhitespace
	}
	return t
})

// whitespaceCpts is llama.cpp's unicode_set_whitespace (the White_Space property).
var whitespaceCpts = []rune{
	0x0009, 0x000A, 0x000B, 0x000C, 0x000D, 0x0020, 0x0085, 0x00A0, 0x1680,
	0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
	0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
}

// asciiFlags holds the flags of the ASCII code points, the common case, without the table.
var asciiFlags = func() (t [utf8.RuneSelf]cpFlags) {
	for c := range t {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = cpLetter
		case unicode.IsNumber(r):
			t[c] = cpNumber
		case unicode.IsPunct(r):
			t[c] = cpPunct
		case unicode.IsSymbol(r):
			t[c] = cpSymbol
		case r == ' ':
			t[c] = cpSeparator
		default:
			t[c] = cpControl
		}
		if unicode.IsSpace(r) {
			t[c] |= cpWhitespace
		}
	}
	return t
}()

// flagsOf returns the flags of code point c (cpUndefined beyond the Unicode range).
func flagsOf(c rune) cpFlags {
	if uint32(c) < utf8.RuneSelf {
		return asciiFlags[c]
	}
	if uint32(c) >= maxCodepoint {
		return cpUndefined
	}
	return cpTable()[c]
}

// toLower is llama.cpp's unicode_tolower (UnicodeData's simple lowercase mapping, as Go's).
func toLower(c rune) rune {
	if c < utf8.RuneSelf {
		if 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	return unicode.ToLower(c)
}

// isHan is llama.cpp's unicode_cpt_is_han.
func isHan(c rune) bool {
	switch {
	case c >= 0x4E00 && c <= 0x9FFF, c >= 0x3400 && c <= 0x4DBF, c >= 0x20000 && c <= 0x2A6DF,
		c >= 0x2A700 && c <= 0x2B73F, c >= 0x2B740 && c <= 0x2B81F, c >= 0x2B820 && c <= 0x2CEAF,
		c >= 0x2CEB0 && c <= 0x2EBEF, c >= 0xF900 && c <= 0xFAFF, c >= 0x2F800 && c <= 0x2FA1F:
		return true
	}
	return false
}

// decodeCpt decodes the code point at s[i] as llama.cpp's unicode_cpt_from_utf8 does: lead and
// continuation bits are checked, but not overlong forms, surrogates or the upper bound. An invalid
// sequence yields U+FFFD and consumes one byte (unicode_cpts_from_utf8).
func decodeCpt(s string, i int) (rune, int) {
	b := s[i]
	switch {
	case b < 0x80:
		return rune(b), 1
	case b&0x40 == 0:
	case b&0x20 == 0:
		if i+1 < len(s) && s[i+1]&0xC0 == 0x80 {
			return rune(b&0x1F)<<6 | rune(s[i+1]&0x3F), 2
		}
	case b&0x10 == 0:
		if i+2 < len(s) && s[i+1]&0xC0 == 0x80 && s[i+2]&0xC0 == 0x80 {
			return rune(b&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
		}
	case b&0x08 == 0:
		if i+3 < len(s) && s[i+1]&0xC0 == 0x80 && s[i+2]&0xC0 == 0x80 && s[i+3]&0xC0 == 0x80 {
			return rune(b&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F), 4
		}
	}
	return utf8.RuneError, 1
}

// appendCpt appends c as llama.cpp's unicode_cpt_to_utf8 encodes it (surrogates included);
// it reports false for a value beyond U+10FFFF, which llama.cpp refuses with an exception.
func appendCpt(b []byte, c rune) ([]byte, bool) {
	switch {
	case c < 0:
		return b, false
	case c <= 0x7F:
		return append(b, byte(c)), true
	case c <= 0x7FF:
		return append(b, 0xC0|byte(c>>6), 0x80|byte(c&0x3F)), true
	case c <= 0xFFFF:
		return append(b, 0xE0|byte(c>>12), 0x80|byte(c>>6&0x3F), 0x80|byte(c&0x3F)), true
	case c <= 0x10FFFF:
		return append(b, 0xF0|byte(c>>18), 0x80|byte(c>>12&0x3F), 0x80|byte(c>>6&0x3F), 0x80|byte(c&0x3F)), true
	}
	return b, false
}

// cptLen is the length of c in llama.cpp's encoding (0 for a value it cannot encode).
func cptLen(c rune) int {
	switch {
	case c < 0:
		return 0
	case c <= 0x7F:
		return 1
	case c <= 0x7FF:
		return 2
	case c <= 0xFFFF:
		return 3
	case c <= 0x10FFFF:
		return 4
	}
	return 0
}

// nfdFirstOf is llama.cpp's unicode_cpts_normalize_nfd for one code point: the first code point of
// its canonical decomposition (the rest of the decomposition is dropped, as llama.cpp drops it).
func nfdFirstOf(c rune) rune {
	if c >= 0xAC00 && c <= 0xD7A3 { // Hangul syllable: its leading jamo
		return 0x1100 + (c-0xAC00)/588
	}
	i, ok := slices.BinarySearchFunc(nfdFirst, c, func(e [2]rune, c rune) int { return int(e[0] - c) })
	if ok {
		return nfdFirst[i][1]
	}
	return c
}
