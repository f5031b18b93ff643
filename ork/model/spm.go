package model

import (
	"container/heap"
	"fmt"
	"strings"
)

// spm is llama.cpp's SentencePiece-style tokenizer (llm_tokenizer_spm).
type spm struct {
	*vocabIndex
	byteTok [256]int32
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
	return t, nil
}

// Encode implements Tokenizer.
func (t *spm) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var out []int32
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
		if out, err = t.tokenize(s, out); err != nil {
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

type spmQueue []spmBigram

func (q spmQueue) Len() int { return len(q) }
func (q spmQueue) Less(i, j int) bool { // highest score first; ties: leftmost
	return q[i].score > q[j].score || (q[i].score == q[j].score && q[i].left < q[j].left)
}
func (q spmQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *spmQueue) Push(x any)   { *q = append(*q, x.(spmBigram)) }
func (q *spmQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

func (t *spm) tokenize(text string, out []int32) ([]int32, error) {
	if text == "" {
		return out, nil
	}
	var syms []spmSymbol
	for off := 0; off < len(text); {
		n := utf8Len(text[off])
		if off+n > len(text) {
			n = len(text) - off
		}
		i := len(syms)
		next := i + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, spmSymbol{prev: i - 1, next: next, off: off, n: n})
		off += n
	}
	q := &spmQueue{}
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].off : syms[l].off+syms[l].n+syms[r].n]
		id, ok := t.lookup(s)
		if !ok {
			return
		}
		var score float32
		if t.v.Scores != nil {
			score = t.v.Scores[id]
		}
		heap.Push(q, spmBigram{left: l, right: r, score: score, size: len(s)})
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(q).(spmBigram)
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
		s := text[syms[i].off : syms[i].off+syms[i].n]
		if id, ok := t.lookup(s); ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); j++ {
			id := t.byteTok[s[j]]
			if id == NoToken {
				return nil, fmt.Errorf("byte 0x%02X of %q has no token <0x%02X>: %w", s[j], s, s[j], ErrBadVocab)
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
