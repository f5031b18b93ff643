package model

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// bpe is llama.cpp's BPE tokenizer (llm_tokenizer_bpe and its sessions): pre-tokenize, then merge
// within each piece by merge rank. Models "gpt2", "gemma4" and "whitespace" use it.
type bpe struct {
	*vocabIndex
	pre    preOptions
	merges *bpeMerges
	// splitSpace is the "whitespace" model: text is cut at whitespace (dropped) and optionally
	// lower-cased before pre-tokenization (llm_tokenizer_whitespace_session).
	splitSpace bool
	gemma4     bool // llama.cpp's special case: a piece of newlines that is a token is that token
	hexBytes   bool // byte fallback through <0xXX> tokens (vocabularies without byte encoding)
}

func newBPE(x *vocabIndex) (*bpe, error) {
	v := x.v
	pre, err := preOptionsFor(v.Pre)
	if err != nil {
		return nil, err
	}
	if len(v.Merges) == 0 {
		return nil, fmt.Errorf("tokenizer.ggml.merges: missing or empty for model %q: %w", v.Model, ErrBadVocab)
	}
	m, err := newBPEMerges(x, v.Merges)
	if err != nil {
		return nil, err
	}
	return &bpe{vocabIndex: x, pre: pre, merges: m, splitSpace: v.Model == "whitespace",
		gemma4: pre.spec.name == "GEMMA4", hexBytes: !pre.spec.byteEncode}, nil
}

// Encode implements Tokenizer.
func (t *bpe) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var out []int32
	if addSpecial && t.v.AddBOS {
		out = append(out, t.v.BOS)
	}
	s := newBPESession(t)
	for _, f := range t.partition(text, parseSpecial) {
		if f.token != NoToken {
			out = append(out, f.token)
			continue
		}
		txt := f.text
		if t.pre.escapeWhitespace {
			txt = strings.ReplaceAll(txt, " ", "\u2581")
		}
		var err error
		if t.splitSpace {
			out, err = s.whitespaceSegments(txt, out)
		} else {
			out, err = s.text(txt, out)
		}
		if err != nil {
			return nil, err
		}
	}
	if addSpecial && t.v.AddEOS {
		out = append(out, t.v.EOS)
	}
	return out, nil
}

// bpeSession is the state of one Encode call: a cache of merged pieces (text -> ids; the merge of a
// piece depends on nothing else) and scratch buffers.
type bpeSession struct {
	t     *bpe
	cache map[string][]int32
	word  []byte
	syms  []bpeSymbol
	queue bigramHeap[bpeBigram]
}

// maxCachedPieces bounds the piece cache of one Encode call.
const maxCachedPieces = 1 << 16

func newBPESession(t *bpe) *bpeSession {
	return &bpeSession{t: t, cache: map[string][]int32{}, queue: bigramHeap[bpeBigram]{before: bpeBefore}}
}

// text pre-tokenizes txt and merges every piece.
func (s *bpeSession) text(txt string, out []int32) ([]int32, error) {
	pt, norm, err := prepareText(txt)
	if err != nil {
		return nil, err
	}
	pieces := s.t.pre.spec.split(pt)
	off, c := 0, 0
	for _, n := range pieces {
		end := off
		for _, r := range pt.cpts[c : c+n] {
			end += cptLen(r)
		}
		out = s.piece(norm[off:end], out)
		off, c = end, c+n
	}
	return out, nil
}

// whitespaceSegments is llm_tokenizer_whitespace_session: whitespace separates segments (and is
// dropped); each segment, lower-cased if the normalizer says so, is tokenized as text.
func (s *bpeSession) whitespaceSegments(txt string, out []int32) ([]int32, error) {
	var seg []byte
	flush := func() error {
		if len(seg) == 0 {
			return nil
		}
		var err error
		out, err = s.text(string(seg), out)
		seg = seg[:0]
		return err
	}
	for i := 0; i < len(txt); {
		r, n := decodeCpt(txt, i)
		i += n
		if flagsOf(r)&cpWhitespace != 0 {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		if s.t.v.Lowercase {
			r = toLower(r)
		}
		var ok bool
		if seg, ok = appendCpt(seg, r); !ok {
			return nil, errBeyondUnicode(r, i-n)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// prepareText decodes txt as llama.cpp does and returns its code points and their re-encoding (txt
// itself when it is valid UTF-8; else invalid bytes become U+FFFD and llama.cpp's lenient forms
// their canonical encoding).
func prepareText(txt string) (*preText, string, error) {
	if utf8.ValidString(txt) {
		return &preText{cpts: []rune(txt)}, txt, nil
	}
	cpts := make([]rune, 0, len(txt))
	norm := make([]byte, 0, len(txt)+8)
	for i := 0; i < len(txt); {
		r, n := decodeCpt(txt, i)
		var ok bool
		if norm, ok = appendCpt(norm, r); !ok {
			return nil, "", errBeyondUnicode(r, i)
		}
		cpts = append(cpts, r)
		i += n
	}
	return &preText{cpts: cpts}, string(norm), nil
}

func errBeyondUnicode(r rune, off int) error {
	return fmt.Errorf("text byte %d: UTF-8 sequence decodes to U+%X, beyond Unicode (llama.cpp's tokenizer fails on it too): %w",
		off, r, ErrBadText)
}

// piece merges one pre-tokenized piece and appends its tokens.
func (s *bpeSession) piece(p string, out []int32) []int32 {
	if p == "" {
		return out
	}
	if ids, ok := s.cache[p]; ok {
		return append(out, ids...)
	}
	w := p
	if s.t.pre.spec.byteEncode {
		s.word = byteEncodeAppend(s.word[:0], p)
		w = string(s.word)
	}
	start := len(out)
	out = s.merge(w, out)
	if len(s.cache) >= maxCachedPieces {
		clear(s.cache)
	}
	s.cache[p] = append([]int32(nil), out[start:]...)
	return out
}

type bpeSymbol struct {
	prev, next int32
	off, n     int32 // byte range in the word; n == 0 once merged away
	id         int32 // interned text (bpeMerges), -1 if the text is in no merge
}

// merge is llm_tokenizer_bpe_session::tokenize for one word.
func (s *bpeSession) merge(w string, out []int32) []int32 {
	t := s.t
	if t.pre.ignoreMerges {
		if id, ok := t.lookup(w); ok {
			return append(out, id)
		}
	}
	if t.gemma4 && strings.Trim(w, "\n") == "" {
		if id, ok := t.lookup(w); ok {
			return append(out, id)
		}
	}
	m := t.merges
	syms := s.syms[:0]
	for off := 0; off < len(w); {
		n := min(utf8Len(w[off]), len(w)-off)
		i := int32(len(syms))
		next := i + 1
		if off+n == len(w) {
			next = -1
		}
		syms = append(syms, bpeSymbol{prev: i - 1, next: next, off: int32(off), n: int32(n), id: m.symbol(w[off : off+n])})
		off += n
	}
	q := &s.queue
	q.reset()
	try := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		if e, ok := m.pair(syms[l].id, syms[r].id); ok {
			q.push(bpeBigram{left: l, right: r, rank: e.rank, size: syms[l].n + syms[r].n})
		}
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		try(i-1, i)
	}
	for q.len() > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // outdated: one side was merged meanwhile
		}
		e, _ := m.pair(l.id, r.id)
		l.n += r.n
		l.id = e.result
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := range syms {
		sym := &syms[i]
		if sym.n == 0 {
			continue
		}
		if id := m.token(sym.id); id != NoToken {
			out = append(out, id)
			continue
		}
		str := w[sym.off : sym.off+sym.n]
		if id, ok := t.lookup(str); ok {
			out = append(out, id)
			continue
		}
		out = t.byteFallback(str, out)
	}
	s.syms = syms
	return out
}

// byteFallback emits the tokens of the single bytes of a text that is not a token, as llama.cpp
// does: a byte-encoded vocabulary looks each byte up as a one-byte text, one without byte encoding
// as <0xXX>; bytes without a token are dropped.
func (t *bpe) byteFallback(str string, out []int32) []int32 {
	const hex = "0123456789ABCDEF"
	for j := 0; j < len(str); j++ {
		var key string
		if t.hexBytes {
			b := str[j]
			key = string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})
		} else {
			key = str[j : j+1]
		}
		if id, ok := t.lookup(key); ok {
			out = append(out, id)
		}
	}
	return out
}

// bpeMerges holds the merge ranks with every text that occurs in a merge interned: a symbol is an
// interned id, and merging is a lookup by id pair.
type bpeMerges struct {
	ids    map[string]int32
	tokens []int32 // interned id -> token id of that text, NoToken if none
	pairs  map[uint64]bpeMerge
}

type bpeMerge struct {
	rank   int32
	result int32 // interned id of left+right
}

func newBPEMerges(x *vocabIndex, merges []string) (*bpeMerges, error) {
	m := &bpeMerges{ids: make(map[string]int32, 2*len(merges)), pairs: make(map[uint64]bpeMerge, len(merges))}
	intern := func(s string) int32 {
		if id, ok := m.ids[s]; ok {
			return id
		}
		id := int32(len(m.tokens))
		m.ids[s] = id
		tok, ok := x.lookup(s)
		if !ok {
			tok = NoToken
		}
		m.tokens = append(m.tokens, tok)
		return id
	}
	for i, mg := range merges {
		// llama.cpp splits at the first space after position 0.
		p := -1
		if len(mg) > 1 {
			if j := strings.IndexByte(mg[1:], ' '); j >= 0 {
				p = j + 1
			}
		}
		if p < 0 {
			return nil, fmt.Errorf("tokenizer.ggml.merges[%d] = %q: want \"left right\": %w", i, mg, ErrBadVocab)
		}
		l, r := intern(mg[:p]), intern(mg[p+1:])
		k := uint64(uint32(l))<<32 | uint64(uint32(r))
		if _, dup := m.pairs[k]; !dup { // the first rank wins, as in llama.cpp
			m.pairs[k] = bpeMerge{rank: int32(i), result: intern(mg[:p] + mg[p+1:])}
		}
	}
	return m, nil
}

func (m *bpeMerges) symbol(s string) int32 {
	if id, ok := m.ids[s]; ok {
		return id
	}
	return -1
}

func (m *bpeMerges) pair(l, r int32) (bpeMerge, bool) {
	if l < 0 || r < 0 {
		return bpeMerge{}, false
	}
	e, ok := m.pairs[uint64(uint32(l))<<32|uint64(uint32(r))]
	return e, ok
}

func (m *bpeMerges) token(id int32) int32 {
	if id < 0 {
		return NoToken
	}
	return m.tokens[id]
}

type bpeBigram struct {
	left, right int32
	rank        int32
	size        int32
}

// bpeBefore orders BPE bigrams: lowest rank first, ties to the leftmost (llama.cpp's
// llm_bigram_bpe::comparator).
func bpeBefore(a, b *bpeBigram) bool {
	return a.rank < b.rank || a.rank == b.rank && a.left < b.left
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

func byteEncodeAppend(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = utf8.AppendRune(dst, byteToRune[s[i]])
	}
	return dst
}

func byteEncode(s string) string { return string(byteEncodeAppend(nil, s)) }
