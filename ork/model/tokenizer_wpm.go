package model

import (
	"fmt"
)

// wpm is llama.cpp's WordPiece tokenizer (llm_tokenizer_wpm, tokenizer model "bert"): BERT-style
// normalization into words, then greedy longest-match of "▁"+word against the vocabulary.
type wpm struct {
	*vocabIndex
	maxLen int // longest token text in bytes
}

func newWPM(x *vocabIndex) (*wpm, error) {
	t := &wpm{vocabIndex: x}
	for i := range x.v.Tokens {
		t.maxLen = max(t.maxLen, len(tokenText(x.v, i)))
	}
	return t, nil
}

// Encode implements Tokenizer. With addSpecial the sequence is BOS (CLS) ... SEP, as llama.cpp
// builds it for "bert" regardless of add_bos_token.
func (t *wpm) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var out []int32
	if addSpecial {
		if t.v.BOS == NoToken {
			return nil, fmt.Errorf("encoding with special tokens: the vocabulary has no bos_token_id: %w", ErrBadVocab)
		}
		out = append(out, t.v.BOS)
	}
	for _, f := range t.partition(text, parseSpecial) {
		if f.token != NoToken {
			out = append(out, f.token)
			continue
		}
		var err error
		if out, err = t.tokenize(f.text, out); err != nil {
			return nil, err
		}
	}
	if addSpecial {
		if t.v.SEP == NoToken {
			return nil, fmt.Errorf("encoding with special tokens: the vocabulary has no seperator_token_id: %w", ErrBadVocab)
		}
		out = append(out, t.v.SEP)
	}
	return out, nil
}

func (t *wpm) tokenize(text string, out []int32) ([]int32, error) {
	words, err := t.words(text)
	if err != nil {
		return nil, err
	}
	for _, word := range words {
		w := "\u2581" + word // phantom space
		start := len(out)
		for i := 0; i < len(w); i++ {
			match := false
			for j := min(len(w), i+t.maxLen+1); j > i; j-- {
				if id, ok := t.lookup(w[i:j]); ok {
					out = append(out, id)
					match = true
					i = j - 1
					break
				}
			}
			if !match { // the whole word is unknown
				out = out[:start]
				break
			}
		}
		if len(out) == start {
			if t.v.UNK == NoToken {
				return nil, fmt.Errorf("word %q has no tokens and the vocabulary has no unknown_token_id: %w", word, ErrBadVocab)
			}
			out = append(out, t.v.UNK)
		}
	}
	return out, nil
}

// words is llm_tokenizer_wpm_session::preprocess: whitespace separates words; NUL, U+FFFD and control
// characters are dropped; with StripAccents each code point becomes the head of its NFD form and
// marks are dropped; with Lowercase letters are lower-cased; punctuation, ASCII symbols and CJK
// ideographs are words of their own.
func (t *wpm) words(text string) ([]string, error) {
	var words []string
	var cur []byte
	flush := func() {
		if len(cur) > 0 {
			words = append(words, string(cur))
			cur = cur[:0]
		}
	}
	for i := 0; i < len(text); {
		c, n := decodeCpt(text, i)
		i += n
		if t.v.StripAccents {
			c = nfdFirstOf(c)
		}
		f := flagsOf(c)
		if f&cpWhitespace != 0 {
			flush()
			continue
		}
		if c == 0 || c == 0xFFFD || f&cpControl != 0 || t.v.StripAccents && f&cpMark != 0 {
			continue
		}
		alone := f&cpPunct != 0 || c < 0x7F && f&cpSymbol != 0 || isChineseChar(c)
		if t.v.Lowercase {
			c = toLower(c)
		}
		if alone {
			flush()
		}
		var ok bool
		if cur, ok = appendCpt(cur, c); !ok {
			return nil, errBeyondUnicode(c, i-n)
		}
		if alone {
			flush()
		}
	}
	flush()
	return words, nil
}

// isChineseChar is llm_tokenizer_wpm::is_chinese_char (with its 0x2B920 lower bound, as in
// Hugging Face's Rust code).
func isChineseChar(c rune) bool {
	return c >= 0x4E00 && c <= 0x9FFF || c >= 0x3400 && c <= 0x4DBF || c >= 0x20000 && c <= 0x2A6DF ||
		c >= 0x2A700 && c <= 0x2B73F || c >= 0x2B740 && c <= 0x2B81F || c >= 0x2B920 && c <= 0x2CEAF ||
		c >= 0xF900 && c <= 0xFAFF || c >= 0x2F800 && c <= 0x2FA1F
}
