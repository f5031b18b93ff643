package model

import (
	"fmt"
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

// FIM roles, the order of Vocab.FIM.
const (
	FIMPre = iota
	FIMSuf
	FIMMid
	FIMPad
	FIMRep
	FIMSep
	fimRoles
)

// Vocab is the tokenizer description, in the plain values GGUF stores under tokenizer.ggml.* (with
// llama.cpp's defaults applied by VocabFromGGUF). Scores and Types may be nil (all zero / all
// normal); Merges is required for the BPE models.
type Vocab struct {
	// Model is tokenizer.ggml.model: "llama" (SentencePiece), "gpt2", "gemma4" or "whitespace" (BPE),
	// "bert" (WordPiece).
	Model  string
	Pre    string // tokenizer.ggml.pre; "" means "default"
	Tokens []string
	Scores []float32
	Types  []TokenType
	Merges []string // "left right", rank = index

	BOS, EOS, UNK int32 // NoToken where absent
	// SEP ends a WordPiece sequence encoded with addSpecial.
	SEP int32
	// FIM holds the fill-in-the-middle ids GGUF gives (NoToken where absent), indexed by FIMPre...:
	// llama.cpp marks a token that looks like an absent one (e.g. "<|fim_prefix|>") a control token.
	FIM [fimRoles]int32

	// AddBOS and AddEOS say whether Encode with addSpecial adds BOS / EOS.
	AddBOS, AddEOS bool
	// AddSpacePrefix: SentencePiece prefixes the text with a space (llama.cpp's default: true).
	AddSpacePrefix bool
	// Lowercase and StripAccents are the normalizer options of "bert" and "whitespace" models
	// (tokenizer.ggml.normalizer.*).
	Lowercase, StripAccents bool

	// ModelName and Architecture are general.name and general.architecture: llama.cpp derives the
	// whitespace stripping around some special tokens from them (Phi-3, nomic-bert-moe, ...).
	ModelName, Architecture string
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
	switch v.Model {
	case "llama":
		return newSPM(newVocabIndex(&v))
	case "gpt2", "gemma4", "whitespace":
		return newBPE(newVocabIndex(&v))
	case "bert":
		return newWPM(newVocabIndex(&v))
	}
	return nil, unsupportedModel(v.Model)
}

func unsupportedModel(m string) error {
	why := "not a tokenizer model llama.cpp knows"
	switch m {
	case "t5":
		why = "the Unigram (UGM) tokenizer is not implemented"
	case "rwkv", "plamo2", "hybriddna":
		why = "this tokenizer is not implemented"
	case "no_vocab", "none":
		why = "the model has no vocabulary"
	}
	return fmt.Errorf("tokenizer.ggml.model %q: %s: %w (implemented: llama, gpt2, gemma4, whitespace, bert)", m, why, ErrUnsupported)
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
	type idName struct {
		name string
		id   int32
	}
	ids := []idName{{"bos", v.BOS}, {"eos", v.EOS}, {"unknown", v.UNK}, {"seperator", v.SEP}}
	for i, name := range fimKeys {
		ids = append(ids, idName{name, v.FIM[i]})
	}
	for _, s := range ids {
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

// fimKeys name the FIM ids in GGUF (tokenizer.ggml.<key>_token_id), in FIM role order.
var fimKeys = [fimRoles]string{"fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep"}
