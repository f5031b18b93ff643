package model

import (
	"fmt"
	"strings"
)

// spm is llama.cpp's SentencePiece-style tokenizer (llm_tokenizer_spm). llama.cpp merges a whole
// fragment at once; here the fragment is cut before each "▁" that no token joins to the byte before
// it (no symbol can ever span such a cut, so the merges on either side are those llama.cpp makes),
// and the merged segments are cached.
type spm struct {
	*vocabIndex
	byteTok [256]int32
	// joinsSpace marks the bytes that precede "▁" inside some token.
	joinsSpace [256]bool
}

func newSPM(x *vocabIndex) (*spm, error) {
	t := &spm{vocabIndex: x}
	const hex = "0123456789ABCDEF"
	for b := 0; b < 256; b++ {
		name := string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})
		if id, ok := x.lookup(name); ok {
			t.byteTok[b] = id
			continue
		}
		if id, ok := x.lookup(string([]byte{byte(b)})); ok { // llama.cpp's fallback: the byte itself
			t.byteTok[b] = id
			continue
		}
		t.byteTok[b] = NoToken // an error only if a text ever needs it
	}
	for i := range x.v.Tokens {
		tok := tokenText(x.v, i)
		for p := strings.Index(tok, "\u2581"); p >= 0; {
			if p > 0 {
				t.joinsSpace[tok[p-1]] = true
			}
			q := strings.Index(tok[p+1:], "\u2581")
			if q < 0 {
				break
			}
			p += 1 + q
		}
	}
	return t, nil
}

// Encode implements Tokenizer.
func (t *spm) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var out []int32
	ses := &spmSession{t: t, cache: map[string][]int32{}, q: bigramHeap[spmBigram]{before: spmBefore}}
	prevSpecial := true // a space prefix goes before the first raw fragment
	if addSpecial && t.v.AddBOS {
		out = append(out, t.v.BOS)
	}
	for _, f := range t.partition(text, parseSpecial) {
		if f.token != NoToken {
			out = append(out, f.token)
			prevSpecial = true
			continue
		}
		s := f.text
		if t.v.AddSpacePrefix && prevSpecial {
			s = " " + s
		}
		s = strings.ReplaceAll(s, " ", "\u2581")
		var err error
		if out, err = ses.segments(s, out); err != nil {
			return nil, err
		}
		prevSpecial = false
	}
	if addSpecial && t.v.AddEOS {
		out = append(out, t.v.EOS)
	}
	return out, nil
}

type spmSymbol struct {
	prev, next int
	off, n     int // byte range in the text
}

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// spmBefore orders SPM bigrams: highest score first, ties to the leftmost (llama.cpp's
// llm_bigram_spm::comparator).
func spmBefore(a, b *spmBigram) bool {
	return a.score > b.score || a.score == b.score && a.left < b.left
}

// spmSession is the state of one Encode call: merged segments by text, and scratch.
type spmSession struct {
	t     *spm
	cache map[string][]int32
	syms  []spmSymbol
	q     bigramHeap[spmBigram]
}

// segments tokenizes an escaped fragment cut into independent segments (see spm).
func (s *spmSession) segments(text string, out []int32) ([]int32, error) {
	const space = "\u2581"
	start := 0
	var err error
	for i := 0; i < len(text); i += min(utf8Len(text[i]), len(text)-i) {
		if i > start && strings.HasPrefix(text[i:], space) && !s.t.joinsSpace[text[i-1]] {
			if out, err = s.segment(text[start:i], out); err != nil {
				return nil, err
			}
			start = i
		}
	}
	return s.segment(text[start:], out)
}

func (s *spmSession) segment(text string, out []int32) ([]int32, error) {
	if ids, ok := s.cache[text]; ok {
		return append(out, ids...), nil
	}
	start := len(out)
	out, err := s.tokenize(text, out)
	if err != nil {
		return nil, err
	}
	if len(s.cache) >= maxCachedPieces {
		clear(s.cache)
	}
	s.cache[text] = append([]int32(nil), out[start:]...)
	return out, nil
}

// tokenize is llm_tokenizer_spm_session::tokenize.
func (s *spmSession) tokenize(text string, out []int32) ([]int32, error) {
	t := s.t
	if text == "" {
		return out, nil
	}
	syms := s.syms[:0]
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		i := len(syms)
		next := i + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, spmSymbol{prev: i - 1, next: next, off: off, n: n})
		off += n
	}
	s.syms = syms
	q := &s.q
	q.reset()
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		str := text[syms[l].off : syms[l].off+syms[l].n+syms[r].n]
		id, ok := t.lookup(str)
		if !ok {
			return
		}
		var score float32
		if t.v.Scores != nil {
			score = t.v.Scores[id]
		}
		q.push(spmBigram{left: l, right: r, score: score, size: len(str)})
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.len() > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := 0; i != -1; i = syms[i].next {
		str := text[syms[i].off : syms[i].off+syms[i].n]
		if id, ok := t.lookup(str); ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(str); j++ {
			id := t.byteTok[str[j]]
			if id == NoToken {
				return nil, fmt.Errorf("byte 0x%02X of %q has no token <0x%02X>: %w", str[j], str, str[j], ErrBadVocab)
			}
			out = append(out, id)
		}
	}
	return out, nil
}

// utf8Len is llama.cpp's unicode_len_utf8: the sequence length announced by a lead byte (1 for a stray
// continuation byte).
func utf8Len(b byte) int {
	switch {
	case b < 0x80, b < 0xC0:
		return 1
	case b < 0xE0:
		return 2
	case b < 0xF0:
		return 3
	default:
		return 4
	}
}
