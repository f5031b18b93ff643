package model

import (
	"fmt"
	"unicode"
)

// preTokenizer splits text into the pieces BPE merges within. Each returned piece is a substring of text,
// and together they cover it in order.
type preTokenizer func(text string) []string

// preTokenizerFor returns the pre-tokenizer llama.cpp selects for tokenizer.ggml.pre, and whether merges
// are skipped for pieces that are already whole tokens (llama.cpp's ignore_merges).
func preTokenizerFor(pre string) (preTokenizer, bool, error) {
	switch pre {
	case "", "default":
		return splitDefault, false, nil
	case "gpt-2", "gpt2":
		return func(s string) []string { return splitPieces(s, gpt2Split) }, false, nil
	case "llama3", "llama-v3", "llama-bpe", "falcon3":
		return func(s string) []string { return splitPieces(s, llama3Split(3)) }, true, nil
	case "qwen2", "deepseek-r1-qwen":
		return func(s string) []string { return splitPieces(s, llama3Split(1)) }, false, nil
	default:
		return nil, false, fmt.Errorf("tokenizer.ggml.pre %q: %w (implemented: default, gpt-2, llama3, llama-bpe, qwen2)", pre, ErrUnsupported)
	}
}

// splitFunc splits a run of code points into piece lengths (in code points).
type splitFunc func(cpts []rune) []int

// splitPieces runs split over the code points of s and cuts s accordingly.
func splitPieces(s string, split splitFunc) []string {
	cpts, offs := runesOf(s)
	var out []string
	pos := 0
	for _, n := range split(cpts) {
		out = append(out, s[offs[pos]:offs[pos+n]])
		pos += n
	}
	return out
}

// runesOf decodes s as llama.cpp does (an invalid byte becomes U+FFFD and consumes one byte) and returns
// the code points and the byte offset of each (plus len(s) at the end).
func runesOf(s string) ([]rune, []int) {
	cpts := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i, r := range s { // range yields RuneError for each invalid byte, advancing one byte
		cpts = append(cpts, r)
		offs = append(offs, i)
	}
	return cpts, append(offs, len(s))
}

type cptFlags struct{ letter, number, space, inRange bool }

func flagsAt(cpts []rune, pos int) cptFlags {
	if pos < 0 || pos >= len(cpts) {
		return cptFlags{}
	}
	r := cpts[pos]
	return cptFlags{letter: unicode.IsLetter(r), number: unicode.IsNumber(r), space: unicode.IsSpace(r), inRange: true}
}

const outOfRange = rune(-1)

func cptAt(cpts []rune, pos int) rune {
	if pos < 0 || pos >= len(cpts) {
		return outOfRange
	}
	return cpts[pos]
}

// gpt2Split is the GPT-2 pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written out by hand as llama.cpp's unicode_regex_split_custom_gpt2 does.
func gpt2Split(cpts []rune) []int {
	var lens []int
	prev := 0
	add := func(end int) int {
		n := end - prev
		if n > 0 {
			lens = append(lens, n)
		}
		prev = end
		return n
	}
	end := len(cpts)
	for pos := 0; pos < end; {
		c := cpts[pos]
		f := flagsAt(cpts, pos)
		if c == '\'' && pos+1 < end {
			n1 := cpts[pos+1]
			if n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd' {
				pos += add(pos + 2)
				continue
			}
			if pos+2 < end {
				n2 := cpts[pos+2]
				if (n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l') {
					pos += add(pos + 3)
					continue
				}
			}
		}
		f2 := f
		if c == ' ' {
			f2 = flagsAt(cpts, pos+1)
		}
		if f2.letter {
			if c == ' ' {
				pos++
			}
			for f2.letter {
				pos++
				f2 = flagsAt(cpts, pos)
			}
			add(pos)
			continue
		}
		if f2.number {
			if c == ' ' {
				pos++
			}
			for f2.number {
				pos++
				f2 = flagsAt(cpts, pos)
			}
			add(pos)
			continue
		}
		if !(f2.space || f2.letter || f2.number) && f2.inRange {
			if c == ' ' {
				pos++
			}
			for !(f2.space || f2.letter || f2.number) && f2.inRange {
				pos++
				f2 = flagsAt(cpts, pos)
			}
			add(pos)
			continue
		}
		nws := 0
		for flagsAt(cpts, pos+nws).space {
			nws++
		}
		if nws > 1 && cptAt(cpts, pos+nws) != outOfRange { // \s+(?!\S)
			pos += nws - 1
			add(pos)
			continue
		}
		if nws > 0 {
			pos += nws
			add(pos)
			continue
		}
		pos++
		add(pos)
	}
	return lens
}

// llama3Split is the Llama 3 pattern (maxDigits 3) and the Qwen2 pattern (maxDigits 1):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// written out by hand after llama.cpp's unicode_regex_split_custom_llama3.
func llama3Split(maxDigits int) splitFunc {
	return func(cpts []rune) []int {
		var lens []int
		prev := 0
		add := func(end int) int {
			n := end - prev
			if n > 0 {
				lens = append(lens, n)
			}
			prev = end
			return n
		}
		end := len(cpts)
		for pos := 0; pos < end; {
			c := cpts[pos]
			f := flagsAt(cpts, pos)
			if c == '\'' && pos+1 < end {
				n1 := unicode.ToLower(cpts[pos+1])
				if n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd' {
					pos += add(pos + 2)
					continue
				}
				if pos+2 < end {
					n2 := unicode.ToLower(cpts[pos+2])
					if (n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l') {
						pos += add(pos + 3)
						continue
					}
				}
			}
			if !(c == '\r' || c == '\n' || f.number) {
				if f.letter || flagsAt(cpts, pos+1).letter {
					pos++
					for flagsAt(cpts, pos).letter {
						pos++
					}
					add(pos)
					continue
				}
			}
			if f.number {
				ini := pos
				for flagsAt(cpts, pos).number {
					pos++
					if pos-ini >= maxDigits {
						add(pos)
						ini = pos
					}
				}
				add(pos)
				continue
			}
			f2 := f
			if c == ' ' {
				f2 = flagsAt(cpts, pos+1)
			}
			if !(f2.space || f2.letter || f2.number) && f.inRange {
				if c == ' ' {
					pos++
				}
				for !(f2.space || f2.letter || f2.number) && f2.inRange {
					pos++
					f2 = flagsAt(cpts, pos)
				}
				for c2 := cptAt(cpts, pos); c2 == '\r' || c2 == '\n'; c2 = cptAt(cpts, pos) {
					pos++
				}
				add(pos)
				continue
			}
			nws, lastRN := 0, 0
			for flagsAt(cpts, pos+nws).space {
				if c2 := cptAt(cpts, pos+nws); c2 == '\r' || c2 == '\n' {
					lastRN = pos + nws + 1
				}
				nws++
			}
			if lastRN > 0 { // \s*[\r\n]+
				pos = lastRN
				add(pos)
				continue
			}
			if nws > 1 && cptAt(cpts, pos+nws) != outOfRange {
				pos += nws - 1
				add(pos)
				continue
			}
			if nws > 0 {
				pos += nws
				add(pos)
				continue
			}
			pos++
			add(pos)
		}
		return lens
	}
}

// splitDefault is llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT for BPE: four patterns applied in turn, each
// splitting the pieces of the previous one (matches and the text between them become separate pieces):
//
//	[\p{P}\$\+<=>\^~\|]+
//	the GPT-2 pattern
//	\p{N}+
//	[0-9][0-9][0-9]
func splitDefault(s string) []string {
	pieces := splitMatches([]string{s}, func(c []rune, i int) int {
		n := 0
		for i+n < len(c) && isDefaultPunct(c[i+n]) {
			n++
		}
		return n
	})
	var next []string
	for _, p := range pieces {
		next = append(next, splitPieces(p, gpt2Split)...)
	}
	pieces = splitMatches(next, func(c []rune, i int) int {
		n := 0
		for i+n < len(c) && unicode.IsNumber(c[i+n]) {
			n++
		}
		return n
	})
	return splitMatches(pieces, func(c []rune, i int) int {
		if i+3 <= len(c) && isDigit(c[i]) && isDigit(c[i+1]) && isDigit(c[i+2]) {
			return 3
		}
		return 0
	})
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' }

func isDefaultPunct(r rune) bool {
	switch r {
	case '$', '+', '<', '=', '>', '^', '~', '|':
		return true
	}
	return unicode.IsPunct(r)
}

// splitMatches cuts every piece at the leftmost-longest matches of match (which returns the match length
// at position i, 0 for none); matches and the runs between them become separate pieces.
func splitMatches(pieces []string, match func(c []rune, i int) int) []string {
	var out []string
	for _, p := range pieces {
		cpts, offs := runesOf(p)
		start := 0
		for i := 0; i < len(cpts); {
			n := match(cpts, i)
			if n == 0 {
				i++
				continue
			}
			if i > start {
				out = append(out, p[offs[start]:offs[i]])
			}
			out = append(out, p[offs[i]:offs[i+n]])
			i += n
			start = i
		}
		if start < len(cpts) {
			out = append(out, p[offs[start]:])
		}
	}
	return out
}
