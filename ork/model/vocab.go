package model

import (
	"fmt"
	"sort"
	"strings"
)

// TokenType is llama.cpp's token type (tokenizer.ggml.token_type).
type TokenType int32

// Token types as stored in GGUF.
const (
	TokenUndefined   TokenType = 0
	TokenNormal      TokenType = 1
	TokenUnknown     TokenType = 2
	TokenControl     TokenType = 3
	TokenUserDefined TokenType = 4
	TokenUnused      TokenType = 5
	TokenByte        TokenType = 6
)

// NoToken marks an absent special token id.
const NoToken int32 = -1

// Vocab is the tokenizer description, in the plain values GGUF stores under tokenizer.ggml.*.
// Scores and Types may be nil (all zero / all normal); Merges is required for model "gpt2".
type Vocab struct {
	Model  string // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
	Pre    string // tokenizer.ggml.pre; "" means "default"
	Tokens []string
	Scores []float32
	Types  []TokenType
	Merges []string // "left right", rank = index

	BOS, EOS, UNK int32 // NoToken where absent

	// AddBOS and AddEOS say whether Encode with addSpecial adds BOS / EOS.
	AddBOS, AddEOS bool
	// AddSpacePrefix: SentencePiece prefixes the text with a space (llama.cpp's default: true).
	AddSpacePrefix bool
}

// Tokenizer turns text into token ids the way llama.cpp's llama_tokenize does.
type Tokenizer interface {
	// Encode tokenizes text. With addSpecial, BOS/EOS are added as the vocabulary asks (AddBOS/AddEOS);
	// with parseSpecial, control tokens written in the text are recognised (user-defined tokens always are).
	Encode(text string, addSpecial, parseSpecial bool) ([]int32, error)
	// Vocab returns the vocabulary the tokenizer was built from. The caller must not modify it.
	Vocab() *Vocab
}

// NewTokenizer validates v and builds the tokenizer its Model names.
func NewTokenizer(v Vocab) (Tokenizer, error) {
	if err := v.validate(); err != nil {
		return nil, err
	}
	base := newVocabIndex(&v)
	switch v.Model {
	case "llama":
		return newSPM(base)
	case "gpt2":
		return newBPE(base)
	default:
		return nil, fmt.Errorf("tokenizer.ggml.model %q: %w (want \"llama\" or \"gpt2\")", v.Model, ErrUnsupported)
	}
}

func (v *Vocab) validate() error {
	n := len(v.Tokens)
	if n == 0 {
		return fmt.Errorf("tokenizer.ggml.tokens: empty: %w", ErrBadVocab)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return fmt.Errorf("tokenizer.ggml.scores: %d entries for %d tokens: %w", len(v.Scores), n, ErrBadVocab)
	}
	if v.Types != nil && len(v.Types) != n {
		return fmt.Errorf("tokenizer.ggml.token_type: %d entries for %d tokens: %w", len(v.Types), n, ErrBadVocab)
	}
	for _, s := range []struct {
		name string
		id   int32
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unknown", v.UNK}} {
		if s.id != NoToken && (s.id < 0 || int(s.id) >= n) {
			return fmt.Errorf("tokenizer.ggml.%s_token_id = %d: outside the vocabulary of %d tokens: %w", s.name, s.id, n, ErrBadVocab)
		}
	}
	if v.AddBOS && v.BOS == NoToken {
		return fmt.Errorf("tokenizer.ggml.add_bos_token is true but there is no bos_token_id: %w", ErrBadVocab)
	}
	if v.AddEOS && v.EOS == NoToken {
		return fmt.Errorf("tokenizer.ggml.add_eos_token is true but there is no eos_token_id: %w", ErrBadVocab)
	}
	return nil
}

// vocabIndex is what both tokenizers share: text -> id and the special-token partitioning.
type vocabIndex struct {
	v       *Vocab
	toID    map[string]int32
	special []int32 // control, user-defined and unknown tokens, longest text first
}

func newVocabIndex(v *Vocab) *vocabIndex {
	x := &vocabIndex{v: v, toID: make(map[string]int32, len(v.Tokens))}
	for i, t := range v.Tokens {
		if t == "" {
			t = fmt.Sprintf("[EMPTY_%d]", i) // as llama.cpp does
		}
		x.toID[t] = int32(i) // a later duplicate wins, as in llama.cpp
	}
	for i := range v.Tokens {
		switch x.tokenType(int32(i)) {
		case TokenControl, TokenUserDefined, TokenUnknown:
			if v.Tokens[i] != "" {
				x.special = append(x.special, int32(i))
			}
		}
	}
	sort.SliceStable(x.special, func(a, b int) bool {
		return len(v.Tokens[x.special[a]]) > len(v.Tokens[x.special[b]])
	})
	return x
}

func (x *vocabIndex) Vocab() *Vocab { return x.v }

func (x *vocabIndex) tokenType(id int32) TokenType {
	if x.v.Types == nil {
		return TokenNormal
	}
	return x.v.Types[id]
}

func (x *vocabIndex) lookup(s string) (int32, bool) {
	id, ok := x.toID[s]
	return id, ok
}

// fragment is a piece of the input: raw text (token == NoToken) or one special token.
type fragment struct {
	text  string
	token int32
}

// partition splits text at occurrences of special tokens, longest first, as llama.cpp's
// tokenizer_st_partition does. Control and unknown tokens are only split out when parseSpecial is set.
func (x *vocabIndex) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{text: text, token: NoToken}}
	if text == "" {
		return nil
	}
	for _, id := range x.special {
		if !parseSpecial && x.tokenType(id) != TokenUserDefined {
			continue
		}
		st := x.v.Tokens[id]
		var out []fragment
		for _, f := range frags {
			if f.token != NoToken || !strings.Contains(f.text, st) {
				out = append(out, f)
				continue
			}
			rest := f.text
			for {
				i := strings.Index(rest, st)
				if i < 0 {
					if rest != "" {
						out = append(out, fragment{text: rest, token: NoToken})
					}
					break
				}
				if i > 0 {
					out = append(out, fragment{text: rest[:i], token: NoToken})
				}
				out = append(out, fragment{token: id})
				rest = rest[i+len(st):]
			}
		}
		frags = out
	}
	return frags
}
