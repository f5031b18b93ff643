package model

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// FuzzNewTokenizer edits one field of a real vocabulary (SentencePiece, LFM2 and Qwen BPE): a
// token's text or type, a merge, a score, a special id, the pre-tokenizer, the lengths. NewTokenizer
// either refuses the vocabulary (with ErrBadVocab, ErrUnsupported or ErrBadText) or builds a tokenizer
// that encodes text to ids inside the vocabulary, or refuses the text with ErrBadText (or ErrBadVocab
// naming a byte token the text needs that the vocabulary lacks); never a panic.
func FuzzNewTokenizer(f *testing.F) {
	var vocabs []*Vocab
	for _, name := range []string{"stories260K.gguf", "tiny-lfm2moe.gguf", "tiny-qwen35.gguf"} {
		vocabs = append(vocabs, openTokenizer(f, name).Vocab())
	}
	f.Add(uint8(0), uint8(0), uint32(300), int32(0), "▁the", "Once upon a time")
	f.Add(uint8(1), uint8(1), uint32(7), int32(0), "Ġ t", "hello world")
	f.Add(uint8(2), uint8(2), uint32(40), int32(3), "", "<|endoftext|> x")
	f.Add(uint8(0), uint8(3), uint32(0), int32(1<<30), "", "a")
	f.Add(uint8(1), uint8(5), uint32(100), int32(0), "", "tokens beyond the cut")
	f.Add(uint8(0), uint8(6), uint32(12), int32(0), "", "nan score")
	f.Add(uint8(2), uint8(7), uint32(0), int32(0), "qwen35", "pre 123 45")
	f.Add(uint8(1), uint8(8), uint32(0), int32(0), "x y", "appended merge")
	f.Add(uint8(0), uint8(9), uint32(0), int32(2), "", "eos")
	f.Fuzz(func(t *testing.T, which, op uint8, idx uint32, val int32, s, text string) {
		base := vocabs[int(which)%len(vocabs)]
		v := *base
		v.Tokens, v.Scores, v.Types, v.Merges = slices.Clone(v.Tokens), slices.Clone(v.Scores), slices.Clone(v.Types), slices.Clone(v.Merges)
		n := len(v.Tokens)
		i := int(idx % uint32(n))
		switch op % 10 {
		case 0:
			v.Tokens[i] = s
		case 1:
			if len(v.Merges) > 0 {
				v.Merges[int(idx)%len(v.Merges)] = s
			}
		case 2:
			if v.Types != nil {
				v.Types[i] = TokenType(val)
			}
		case 3:
			v.BOS = val
		case 4:
			v.UNK = val
		case 5:
			v.Tokens = v.Tokens[:i]
			if v.Scores != nil {
				v.Scores = v.Scores[:i]
			}
			if v.Types != nil {
				v.Types = v.Types[:i]
			}
		case 6:
			if v.Scores != nil {
				v.Scores[i] = float32(math.NaN())
			}
		case 7:
			v.Pre = s
		case 8:
			v.Merges = append(v.Merges, s)
		case 9:
			v.EOS, v.AddEOS = val, true
		}
		tok, err := NewTokenizer(v)
		if err != nil {
			if !errors.Is(err, ErrBadVocab) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrBadText) {
				t.Fatalf("NewTokenizer: %v: wraps none of the vocabulary errors", err)
			}
			return
		}
		for _, special := range []bool{false, true} {
			ids, err := tok.Encode(text, special, special)
			if err != nil {
				if !errors.Is(err, ErrBadText) && !errors.Is(err, ErrBadVocab) { // a byte token the text needs, cut
					t.Fatalf("Encode(%q): %v", text, err)
				}
				continue
			}
			for _, id := range ids {
				if id < 0 || int(id) >= len(v.Tokens) {
					t.Fatalf("Encode(%q) gave id %d outside the %d tokens", text, id, len(v.Tokens))
				}
			}
		}
	})
}
