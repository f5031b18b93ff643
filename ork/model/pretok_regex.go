package model

import "slices"

// The pre-tokenizer patterns llama.cpp runs through std::regex (ECMAScript: leftmost match, ordered
// alternation, greedy quantifiers with backtracking), written as sequences of items over the keys
// llama.cpp's unicode_regex_split feeds the regex engine:
//
//   - collapsed keys, for a pattern that uses \p{..}: an ASCII code point is itself, any other becomes
//     0x0B if it is whitespace, else one byte per category (0xD1 number, 0xD2 letter, 0xD3
//     punctuation, 0xD4 mark, 0xD5 symbol, 0xD0 anything else). \p{L} is then [\xD2A-Za-z], \p{N}
//     [\xD10-9], \p{P} [\xD3 + ASCII punctuation], \p{S} [\xD5$+<=>^`|~], \p{M} [\xD4], and \p{Lu},
//     \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo} are all \p{L}: case is lost outside ASCII.
//   - wide keys, for a pattern without \p{..}: the code point itself, with non-ASCII whitespace
//     replaced by 0x0B (std::wregex's \s knows ASCII whitespace only).
//
// In both, \s is ASCII \t \n \v \f \r and space, and \d is ASCII 0-9.

// keyMode selects the key a pattern matches against.
type keyMode uint8

const (
	keysCollapsed keyMode = iota
	keysWide
)

// Collapsed category keys.
const (
	keyOther  = 0xD0
	keyNumber = 0xD1
	keyLetter = 0xD2
	keyPunct  = 0xD3
	keyMark   = 0xD4
	keySymbol = 0xD5
)

func collapsedKey(c rune) rune {
	if c < 0x80 {
		return c
	}
	f := flagsOf(c)
	switch {
	case f&cpWhitespace != 0:
		return 0x0B
	case f&cpNumber != 0:
		return keyNumber
	case f&cpLetter != 0:
		return keyLetter
	case f&cpPunct != 0:
		return keyPunct
	case f&cpMark != 0:
		return keyMark
	case f&cpSymbol != 0:
		return keySymbol
	}
	return keyOther
}

func wideKey(c rune) rune {
	if c >= 0x80 && flagsOf(c)&cpWhitespace != 0 {
		return 0x0B
	}
	return c
}

// charClass is a set of keys: a bitmap for keys below 256 and sorted ranges above (negated by neg).
type charClass struct {
	low    [4]uint64
	ranges [][2]rune
	neg    bool
}

func (c *charClass) has(k rune) bool {
	if k < 256 {
		return c.low[k>>6]>>(k&63)&1 != 0
	}
	_, in := slices.BinarySearchFunc(c.ranges, k, func(r [2]rune, k rune) int {
		switch {
		case k < r[0]:
			return 1
		case k > r[1]:
			return -1
		}
		return 0
	})
	return in != c.neg
}

// span is the class of keys lo..hi.
func span(lo, hi rune) *charClass {
	c := &charClass{}
	for k := lo; k <= hi && k < 256; k++ {
		c.low[k>>6] |= 1 << (k & 63)
	}
	if hi >= 256 {
		c.ranges = [][2]rune{{max(lo, 256), hi}}
	}
	return c
}

// chars is the class of the listed code points.
func chars(s string) *charClass {
	var parts []*charClass
	for _, r := range s {
		parts = append(parts, span(r, r))
	}
	return union(parts...)
}

// union joins classes; none of them may be negated.
func union(cs ...*charClass) *charClass {
	u := &charClass{}
	for _, c := range cs {
		if c.neg {
			panic("pretok: union of a negated class")
		}
		for i := range u.low {
			u.low[i] |= c.low[i]
		}
		u.ranges = append(u.ranges, c.ranges...)
	}
	slices.SortFunc(u.ranges, func(a, b [2]rune) int { return int(a[0] - b[0]) })
	merged := u.ranges[:0]
	for _, r := range u.ranges {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1]+1 {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	u.ranges = merged
	return u
}

// not is the complement of c.
func not(c *charClass) *charClass {
	n := &charClass{ranges: c.ranges, neg: !c.neg}
	for i := range n.low {
		n.low[i] = ^c.low[i]
	}
	return n
}

// minus is a without the keys below 256 of b (b's ranges are ignored: used for ASCII exclusions).
func minus(a, b *charClass) *charClass {
	m := &charClass{ranges: a.ranges, neg: a.neg}
	for i := range m.low {
		m.low[i] = a.low[i] &^ b.low[i]
	}
	return m
}

// Classes shared by the patterns (collapsed keys unless named otherwise).
var (
	clsSpace   = chars("\t\n\v\f\r ") // \s, in both key modes
	clsNotSp   = not(clsSpace)        // \S
	clsCRLF    = chars("\r\n")
	clsDigit   = span('0', '9') // [0-9], \d
	clsLetter  = union(span('A', 'Z'), span('a', 'z'), span(keyLetter, keyLetter))
	clsNumber  = union(clsDigit, span(keyNumber, keyNumber))
	clsPunct   = union(chars("!\"#%&'()*,-./:;?@[\\]_{}"), span(keyPunct, keyPunct))
	clsSymbol  = union(chars("$+<=>^`|~"), span(keySymbol, keySymbol))
	clsMark    = span(keyMark, keyMark)
	clsLetMark = union(clsLetter, clsMark)
	// clsPrefix is [^\r\n\p{L}\p{N}], the optional lead of a word.
	clsPrefix = not(union(clsCRLF, clsLetter, clsNumber))
	// clsOther is [^\s\p{L}\p{N}].
	clsOther = not(union(clsSpace, clsLetter, clsNumber))
)

type itemKind uint8

const (
	itemRun      itemKind = iota // cls repeated min..max times, greedy
	itemNotAhead                 // (?!cls): the next key is not in cls (the end of the piece passes)
	itemEnd                      // $: the end of the piece
	itemAlt                      // the first of branches (each a fixed sequence of classes) that leads to a match
	itemWords                    // (?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+, only as the last item of an alternative
	itemSpaceNL                  // \s*[\r\n]+ or \s*[\r\n], only as the last item of an alternative
)

type item struct {
	kind     itemKind
	cls      *charClass
	min, max int
	branches [][]*charClass
}

const unbounded = int(^uint(0) >> 1)

func run(c *charClass, min, max int) item { return item{kind: itemRun, cls: c, min: min, max: max} }
func one(c *charClass) item               { return run(c, 1, 1) }
func opt(c *charClass) item               { return run(c, 0, 1) }
func star(c *charClass) item              { return run(c, 0, unbounded) }
func plus(c *charClass) item              { return run(c, 1, unbounded) }
func notAhead(c *charClass) item          { return item{kind: itemNotAhead, cls: c} }

// spaceNL is \s*[\r\n]+ (and \s*[\r\n], which matches the same: the greedy \s* gives back up to
// the run's last CR or LF, which [\r\n]+ then takes alone).
func spaceNL() item { return item{kind: itemSpaceNL} }

// lit is the literal text s, one item per code point.
func lit(s string) []item {
	var out []item
	for _, r := range s {
		out = append(out, one(span(r, r)))
	}
	return out
}

// alt is an alternation of literal branches, each a string whose code points are matched as keys;
// in a branch, an upper-case ASCII letter also matches its lower case ("'LL" is '[lL][lL]).
func alt(optional bool, branches ...string) item {
	it := item{kind: itemAlt, min: 1}
	if optional {
		it.min = 0
	}
	for _, b := range branches {
		var seq []*charClass
		for _, r := range b {
			if r >= 'A' && r <= 'Z' {
				seq = append(seq, chars(string([]rune{r, r + 'a' - 'A'})))
			} else {
				seq = append(seq, span(r, r))
			}
		}
		it.branches = append(it.branches, seq)
	}
	return it
}

// contractions is (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]).
var contractionBranches = []string{"'S", "'T", "'RE", "'VE", "'M", "'LL", "'D"}

func contractions(optional bool) item { return alt(optional, contractionBranches...) }

// pattern is an ordered alternation of item sequences over one key mode.
type pattern struct {
	mode keyMode
	alts [][]item
}

func seq(items ...any) []item {
	var out []item
	for _, x := range items {
		switch v := x.(type) {
		case item:
			out = append(out, v)
		case []item:
			out = append(out, v...)
		default:
			panic("pretok: seq of a non-item")
		}
	}
	return out
}

// matcher matches a pattern within one piece keys[:end].
type matcher struct {
	keys []rune
	end  int
	// The whitespace run itemSpaceNL scanned last, [runFrom, runEnd), and the index after its last
	// CR or LF (-1 for none): a later start inside the run reuses it, which keeps long whitespace
	// runs linear where std::regex backtracks quadratically (to the same matches).
	runFrom, runEnd, lastNL int
}

func newMatcher(keys []rune, end int) *matcher {
	return &matcher{keys: keys, end: end, runFrom: -1, runEnd: -1}
}

// matchAt returns the end of the first alternative of p matching at pos, or -1.
func (m *matcher) matchAt(p *pattern, pos int) int {
	for _, a := range p.alts {
		if e := m.items(a, pos); e >= 0 {
			return e
		}
	}
	return -1
}

// items matches items at pos with backtracking and returns the match end, or -1.
func (m *matcher) items(items []item, pos int) int {
	if len(items) == 0 {
		return pos
	}
	keys, end := m.keys, m.end
	it := &items[0]
	switch it.kind {
	case itemRun:
		n := 0
		for n < it.max && pos+n < end && it.cls.has(keys[pos+n]) {
			n++
		}
		for ; n >= it.min; n-- {
			if e := m.items(items[1:], pos+n); e >= 0 {
				return e
			}
		}
		return -1
	case itemNotAhead:
		if pos < end && it.cls.has(keys[pos]) {
			return -1
		}
		return m.items(items[1:], pos)
	case itemEnd:
		if pos != end {
			return -1
		}
		return m.items(items[1:], pos)
	case itemAlt:
	branch:
		for _, b := range it.branches {
			if pos+len(b) > end {
				continue
			}
			for i, c := range b {
				if !c.has(keys[pos+i]) {
					continue branch
				}
			}
			if e := m.items(items[1:], pos+len(b)); e >= 0 {
				return e
			}
		}
		if it.min == 0 {
			return m.items(items[1:], pos)
		}
		return -1
	case itemWords:
		// Greedy: a letter, then letters, marks, and spaces followed by a letter. Nothing follows
		// this item, so the greedy match is the match.
		if pos >= end || !clsLetter.has(keys[pos]) {
			return -1
		}
		p := pos + 1
		for p < end {
			k := keys[p]
			if clsLetMark.has(k) || k == ' ' && p+1 < end && clsLetter.has(keys[p+1]) {
				if k == ' ' {
					p++
				}
				p++
				continue
			}
			break
		}
		return p
	case itemSpaceNL:
		if pos < m.runFrom || pos >= m.runEnd {
			m.runFrom, m.runEnd, m.lastNL = pos, pos, -1
			for m.runEnd < end && clsSpace.has(keys[m.runEnd]) {
				if clsCRLF.has(keys[m.runEnd]) {
					m.lastNL = m.runEnd + 1
				}
				m.runEnd++
			}
		}
		if m.lastNL > pos {
			return m.lastNL
		}
		return -1
	}
	panic("pretok: unknown item kind")
}
