package model

import (
	"container/heap"
	"fmt"
	"strings"
	"unicode/utf8"
)

// bpe is llama.cpp's byte-level BPE tokenizer (llm_tokenizer_bpe).
type bpe struct {
	*vocabIndex
	ranks        map[[2]string]int
	pre          preTokenizer
	ignoreMerges bool
}

func newBPE(x *vocabIndex) (*bpe, error) {
	if len(x.v.Merges) == 0 {
		return nil, fmt.Errorf("tokenizer.ggml.merges: missing or empty for model gpt2: %w", ErrBadVocab)
	}
	pre, ignore, err := preTokenizerFor(x.v.Pre)
	if err != nil {
		return nil, err
	}
	t := &bpe{vocabIndex: x, ranks: make(map[[2]string]int, len(x.v.Merges)), pre: pre, ignoreMerges: ignore}
	for i, m := range x.v.Merges {
		// llama.cpp splits at the first space after position 0.
		p := -1
		if len(m) > 1 {
			if j := strings.IndexByte(m[1:], ' '); j >= 0 {
				p = j + 1
			}
		}
		if p < 0 {
			return nil, fmt.Errorf("tokenizer.ggml.merges[%d] = %q: want \"left right\": %w", i, m, ErrBadVocab)
		}
		k := [2]string{m[:p], m[p+1:]}
		if _, dup := t.ranks[k]; !dup { // the first rank wins, as in llama.cpp
			t.ranks[k] = i
		}
	}
	return t, nil
}

// Encode implements Tokenizer.
func (t *bpe) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var out []int32
	if addSpecial && t.v.AddBOS {
		out = append(out, t.v.BOS)
	}
	for _, f := range t.partition(text, parseSpecial) {
		if f.token != NoToken {
			out = append(out, f.token)
			continue
		}
		for _, piece := range t.pre(validUTF8(f.text)) {
			out = t.word(byteEncode(piece), out)
		}
	}
	if addSpecial && t.v.AddEOS {
		out = append(out, t.v.EOS)
	}
	return out, nil
}

// validUTF8 replaces every invalid byte by U+FFFD, as llama.cpp's code point decoder does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

type bpeBigram struct {
	left, right int
	rank        int
	text        string
}

type bpeQueue []bpeBigram

func (q bpeQueue) Len() int { return len(q) }
func (q bpeQueue) Less(i, j int) bool { // lowest rank first; ties: leftmost
	return q[i].rank < q[j].rank || (q[i].rank == q[j].rank && q[i].left < q[j].left)
}
func (q bpeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *bpeQueue) Push(x any)   { *q = append(*q, x.(bpeBigram)) }
func (q *bpeQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// word merges one byte-encoded piece and appends its tokens.
func (t *bpe) word(w string, out []int32) []int32 {
	var syms []spmSymbol
	if t.ignoreMerges {
		if id, ok := t.lookup(w); ok {
			return append(out, id)
		}
	}
	for off := 0; off < len(w); {
		n := min(utf8Len(w[off]), len(w)-off)
		i := len(syms)
		next := i + 1
		if off+n == len(w) {
			next = -1
		}
		syms = append(syms, spmSymbol{prev: i - 1, next: next, off: off, n: n})
		off += n
	}
	str := func(i int) string { return w[syms[i].off : syms[i].off+syms[i].n] }
	q := &bpeQueue{}
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		a, b := str(l), str(r)
		rank, ok := t.ranks[[2]string{a, b}]
		if !ok {
			return
		}
		heap.Push(q, bpeBigram{left: l, right: r, rank: rank, text: a + b})
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(q).(bpeBigram)
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || str(b.left)+str(b.right) != b.text {
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
	for i := range syms {
		if syms[i].n == 0 {
			continue
		}
		s := str(i)
		if id, ok := t.lookup(s); ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); j++ { // llama.cpp: single bytes that happen to be tokens, the rest dropped
			if id, ok := t.lookup(s[j : j+1]); ok {
				out = append(out, id)
			}
		}
	}
	return out
}

// byteToRune is GPT-2's bytes_to_unicode table: printable bytes map to themselves, the others to 256+n.
var byteToRune = func() (m [256]rune) {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}()

func byteEncode(s string) string {
	var b strings.Builder
	b.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteToRune[s[i]])
	}
	return b.String()
}
