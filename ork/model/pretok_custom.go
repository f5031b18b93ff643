package model

// The pre-tokenizer patterns llama.cpp implements by hand in unicode.cpp (unicode_regex_split_custom_*)
// rather than through std::regex. They follow llama.cpp's code, including where it departs from the
// regular expression it stands for; they read code point flags directly, not regex keys.

// cutter walks one piece [ini, end) of a text and records the lengths of the pieces it cuts.
type cutter struct {
	cpts     []rune
	ini, end int
	prev     int // end of the last recorded piece
	out      []int
}

const outOfRange = rune(-1)

func (c *cutter) cpt(pos int) rune {
	if pos >= c.ini && pos < c.end {
		return c.cpts[pos]
	}
	return outOfRange
}

// flags are the code point flags at pos, 0 outside the piece (llama.cpp's empty unicode_cpt_flags).
func (c *cutter) flags(pos int) cpFlags {
	if pos >= c.ini && pos < c.end {
		return flagsOf(c.cpts[pos])
	}
	return 0
}

// add records the piece ending at end and returns its length (llama.cpp's _add_token).
func (c *cutter) add(end int) int {
	n := end - c.prev
	if n > 0 {
		c.out = append(c.out, n)
	}
	c.prev = end
	return n
}

// contraction returns the length (2 or 3) of 's 't 're 've 'm 'll 'd at pos, 0 for none; with fold,
// the letters match in either case (llama.cpp's (?i:...) and '[sS]... forms).
func (c *cutter) contraction(pos int, fold bool) int {
	if c.cpt(pos) != '\'' || pos+1 >= c.end {
		return 0
	}
	low := func(r rune) rune {
		if fold {
			return toLower(r)
		}
		return r
	}
	n1 := low(c.cpt(pos + 1))
	if n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd' {
		return 2
	}
	if pos+2 < c.end {
		n2 := low(c.cpt(pos + 2))
		if (n1 == 'r' || n1 == 'v') && n2 == 'e' || n1 == 'l' && n2 == 'l' {
			return 3
		}
	}
	return 0
}

// whitespace handles the trailing alternatives shared by the patterns: [\s*[\r\n]+ if crlf] |
// \s+(?!\S) | \s+ | any single code point. It returns the new position.
func (c *cutter) whitespace(pos int, crlf bool) int {
	nws, lastRN := 0, 0
	for c.flags(pos+nws)&cpWhitespace != 0 {
		if r := c.cpt(pos + nws); r == '\r' || r == '\n' {
			lastRN = pos + nws + 1
		}
		nws++
	}
	switch {
	case crlf && lastRN > 0: // \s*[\r\n]+
		pos = lastRN
	case nws > 1 && c.cpt(pos+nws) != outOfRange: // \s+(?!\S)
		pos += nws - 1
	case nws > 0: // \s+
		pos += nws
	default: // no match
		pos++
	}
	c.add(pos)
	return pos
}

// digits handles \p{N}{1,maxDigits} at pos (a number): the run is cut every maxDigits code points.
// It returns the new position.
func (c *cutter) digits(pos, maxDigits int) int {
	ini := pos
	for c.flags(pos)&cpNumber != 0 {
		pos++
		if pos-ini >= maxDigits {
			c.add(pos)
			ini = pos
		}
	}
	c.add(pos)
	return pos
}

// otherRun handles " ?[^\s WORD \p{N}]+[\r\n]*" at pos, if it applies there (llama.cpp checks that
// the code point at pos is in the piece when guardCurrent, else the one after the optional space).
// It returns the new position and whether it matched.
func (c *cutter) otherRun(pos int, word cpFlags, guardCurrent bool) (int, bool) {
	r := c.cpt(pos)
	f := c.flags(pos)
	f2 := f
	if r == ' ' {
		f2 = c.flags(pos + 1)
	}
	guard := f2
	if guardCurrent {
		guard = f
	}
	if f2&(cpWhitespace|word|cpNumber) != 0 || guard == 0 {
		return pos, false
	}
	if r == ' ' {
		pos++
	}
	for f2&(cpWhitespace|word|cpNumber) == 0 && f2 != 0 {
		pos++
		f2 = c.flags(pos)
	}
	for r2 := c.cpt(pos); r2 == '\r' || r2 == '\n'; r2 = c.cpt(pos) {
		pos++
	}
	c.add(pos)
	return pos, true
}

// customStage is a stage written as a function over one piece.
type customStage func(c *cutter)

func (s customStage) split(t *preText, ini, end int, out []int) []int {
	c := cutter{cpts: t.cpts, ini: ini, end: end, prev: ini, out: out}
	s(&c)
	return c.out
}

// gpt2Cut is unicode_regex_split_custom_gpt2, for
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2Cut(c *cutter) {
	for pos := c.ini; pos < c.end; {
		if n := c.contraction(pos, false); n > 0 {
			pos += c.add(pos + n)
			continue
		}
		r := c.cpt(pos)
		f2 := c.flags(pos)
		if r == ' ' {
			f2 = c.flags(pos + 1)
		}
		var class cpFlags
		switch {
		case f2&cpLetter != 0:
			class = cpLetter
		case f2&cpNumber != 0:
			class = cpNumber
		case f2&(cpWhitespace|cpLetter|cpNumber) == 0 && f2 != 0:
			class = 0 // [^\s\p{L}\p{N}]
		default:
			pos = c.whitespace(pos, false)
			continue
		}
		if r == ' ' {
			pos++
		}
		for {
			f := c.flags(pos)
			if class != 0 && f&class == 0 || class == 0 && (f&(cpWhitespace|cpLetter|cpNumber) != 0 || f == 0) {
				break
			}
			pos++
		}
		c.add(pos)
	}
}

// llama3Cut returns unicode_regex_split_custom_llama3 (word cpLetter, maxDigits 3), _qwen2
// (cpLetter, 1) and _qwen35 (cpLetter|cpMark, 1), for
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?WORD+|\p{N}{1,maxDigits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// where WORD is \p{L} or [\p{L}\p{M}] (then the punctuation run excludes \p{M} too).
func llama3Cut(word cpFlags, maxDigits int) customStage {
	return func(c *cutter) {
		for pos := c.ini; pos < c.end; {
			if n := c.contraction(pos, true); n > 0 {
				pos += c.add(pos + n)
				continue
			}
			r := c.cpt(pos)
			f := c.flags(pos)
			if !(r == '\r' || r == '\n' || f&cpNumber != 0) && (f&word != 0 || c.flags(pos+1)&word != 0) {
				pos++
				for c.flags(pos)&word != 0 {
					pos++
				}
				c.add(pos)
				continue
			}
			if f&cpNumber != 0 {
				pos = c.digits(pos, maxDigits)
				continue
			}
			if p, ok := c.otherRun(pos, word, true); ok {
				pos = p
				continue
			}
			pos = c.whitespace(pos, true)
		}
	}
}

// kimiK2Cut is unicode_regex_split_custom_kimi_k2, for
//
//	[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// as llama.cpp approximates it: a run of non-Han letters (marks not included), letter case ignored.
func kimiK2Cut(c *cutter) {
	letter := func(pos int) bool { return c.flags(pos)&cpLetter != 0 && !isHan(c.cpt(pos)) }
	for pos := c.ini; pos < c.end; {
		r := c.cpt(pos)
		f := c.flags(pos)
		if isHan(r) {
			for isHan(c.cpt(pos)) {
				pos++
			}
			c.add(pos)
			continue
		}
		lead := !(r == '\r' || r == '\n' || f&(cpLetter|cpNumber) != 0)
		if f&cpLetter != 0 && !isHan(r) || lead && letter(pos+1) {
			hasLead := false
			if lead {
				hasLead = true
				pos++
			}
			hasLetters := false
			for letter(pos) {
				hasLetters = true
				pos++
			}
			if hasLetters || !hasLead && letter(pos) {
				if !hasLetters {
					pos++
				}
				for letter(pos) {
					pos++
				}
				pos += c.contraction(pos, true) // (?i:'s|'t|'re|'ve|'m|'ll|'d)?
				c.add(pos)
				continue
			} else if hasLead {
				pos--
			}
		}
		if f&cpNumber != 0 {
			pos = c.digits(pos, 3)
			continue
		}
		if p, ok := c.otherRun(pos, cpLetter, false); ok {
			pos = p
			continue
		}
		pos = c.whitespace(pos, true)
	}
}

// digitGroupsCut is unicode_regex_split_custom_afmoe (llama.cpp's \p{AFMoE_digits}, also used for
// tiny_aya's \d{1,3}(?=(?:\d{3})*\b)): a run of \p{N} is cut into a leading 1-2 digits and groups of
// three. As in llama.cpp, the text before a run joins the run's first group.
func digitGroupsCut(c *cutter) {
	for pos := c.ini; pos < c.end; {
		if c.flags(pos)&cpNumber == 0 {
			pos++
			continue
		}
		start := pos
		for pos < c.end && c.flags(pos)&cpNumber != 0 {
			pos++
		}
		cur := start
		if rem := (pos - start) % 3; rem > 0 {
			cur += rem
			c.add(cur)
		}
		for cur < pos {
			cur += 3
			c.add(cur)
		}
	}
	if c.prev < c.end {
		c.add(c.end)
	}
}

// newlinesCut is unicode_regex_split_custom_newlines, for [^\n]+|[\n]+.
func newlinesCut(c *cutter) {
	for pos := c.ini; pos < c.end; {
		nl := c.cpts[pos] == '\n'
		for pos < c.end && (c.cpts[pos] == '\n') == nl {
			pos++
		}
		c.add(pos)
	}
}

// digitTriplesCut is (?=(\d{3})+(?!\d)) as std::wregex runs it: an empty match before every ASCII
// digit run (to the end of the piece) whose length is a multiple of three, so the piece is cut there.
func digitTriplesCut(c *cutter) {
	for pos := c.ini; pos < c.end; {
		if !isDigit(c.cpts[pos]) {
			pos++
			continue
		}
		start := pos
		for pos < c.end && isDigit(c.cpts[pos]) {
			pos++
		}
		for p := start + (pos-start)%3; p < pos; p += 3 {
			c.add(p)
		}
	}
	c.add(c.end)
}

// trailingSpaceCut is \s+$ as std::wregex runs it (the leftmost match is the piece's trailing
// whitespace run), without its quadratic backtracking over whitespace runs that do not end the piece.
func trailingSpaceCut(c *cutter) {
	r := c.end
	for r > c.ini && flagsOf(c.cpts[r-1])&cpWhitespace != 0 {
		r--
	}
	c.add(r)
	c.add(c.end)
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' }
