package model

import (
	"fmt"

	"orkpipe/ork/gguf"
)

// VocabFromGGUF reads the tokenizer.ggml.* metadata of f as llama.cpp's llama_vocab::impl::load
// does, applying its defaults where a key is absent:
//
//	model   bos  eos  unk  sep  add_bos  add_space_prefix
//	llama   1    2    0    -    true     true
//	bert    101  -    100  102  true     false
//	gpt2    11   11   -    -    false*   false    (also "whitespace")
//	gemma4  -    -    -    -    false*   false
//
// (* true for the pre-tokenizers that set it: llama3, tekken, chameleon; gemma4 forces it.) A special
// id outside the vocabulary keeps the default, as llama.cpp does (it warns "bad special token").
// Models llama.cpp knows but this package does not tokenize (t5, rwkv, plamo2, hybriddna) and an
// unknown tokenizer.ggml.pre are refused with ErrUnsupported.
func VocabFromGGUF(f *gguf.File) (Vocab, error) {
	v := Vocab{BOS: NoToken, EOS: NoToken, UNK: NoToken, SEP: NoToken, Lowercase: true}
	for i := range v.FIM {
		v.FIM[i] = NoToken
	}
	var err error
	if v.Model, err = f.String("tokenizer.ggml.model"); err != nil {
		return v, err
	}
	if val, ok := f.Lookup("tokenizer.ggml.pre"); ok {
		if v.Pre, err = val.Str(); err != nil {
			return v, fmt.Errorf("%s: tokenizer.ggml.pre: %w", f.Path, err)
		}
	}
	if v.Tokens, err = stringArray(f, "tokenizer.ggml.tokens"); err != nil {
		return v, err
	}
	n := len(v.Tokens)
	if val, ok := f.Lookup("tokenizer.ggml.scores"); ok {
		if v.Scores, err = val.Float32Array(); err != nil {
			ints, ierr := val.Int32Array() // llama.cpp also takes integer scores
			if ierr != nil {
				return v, fmt.Errorf("%s: tokenizer.ggml.scores: want an array of f32 or i32: %w", f.Path, err)
			}
			v.Scores = make([]float32, len(ints))
			for i, s := range ints {
				v.Scores[i] = float32(s)
			}
		}
		if len(v.Scores) < n {
			return v, fmt.Errorf("%s: tokenizer.ggml.scores: %d entries for %d tokens: %w", f.Path, len(v.Scores), n, ErrBadVocab)
		}
		v.Scores = v.Scores[:n]
	}
	if val, ok := f.Lookup("tokenizer.ggml.token_type"); ok {
		a, err := val.Int32Array()
		if err != nil {
			return v, fmt.Errorf("%s: tokenizer.ggml.token_type: %w", f.Path, err)
		}
		if len(a) < n {
			return v, fmt.Errorf("%s: tokenizer.ggml.token_type: %d entries for %d tokens: %w", f.Path, len(a), n, ErrBadVocab)
		}
		v.Types = make([]TokenType, n)
		for i := range v.Types {
			v.Types[i] = TokenType(a[i])
		}
	}
	switch v.Model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case "bert":
		v.BOS, v.UNK, v.SEP = 101, 100, 102
		v.AddBOS = true
	case "gpt2", "whitespace", "gemma4":
		if v.Merges, err = stringArray(f, "tokenizer.ggml.merges"); err != nil {
			return v, err
		}
		if v.Model == "gemma4" {
			v.Pre = "gemma4"
		} else {
			v.BOS, v.EOS = 11, 11
		}
		o, err := preOptionsFor(v.Pre)
		if err != nil {
			return v, fmt.Errorf("%s: %w", f.Path, err)
		}
		v.AddBOS = o.addBOS
		if o.noBOS {
			v.BOS = NoToken
		}
		if o.noLowercase {
			v.Lowercase = false
		}
	default:
		return v, fmt.Errorf("%s: %w", f.Path, unsupportedModel(v.Model))
	}
	for _, id := range []*int32{&v.BOS, &v.EOS, &v.UNK, &v.SEP} {
		if *id >= int32(n) {
			*id = NoToken
		}
	}
	type idKey struct {
		key string
		id  *int32
	}
	ids := []idKey{{"bos", &v.BOS}, {"eos", &v.EOS}, {"unknown", &v.UNK}, {"seperator", &v.SEP}}
	for i, k := range fimKeys {
		ids = append(ids, idKey{k, &v.FIM[i]})
	}
	// The deprecated names come last and win, as in llama.cpp.
	ids = append(ids, idKey{"prefix", &v.FIM[FIMPre]}, idKey{"suffix", &v.FIM[FIMSuf]}, idKey{"middle", &v.FIM[FIMMid]})
	for _, s := range ids {
		val, ok := f.Lookup("tokenizer.ggml." + s.key + "_token_id")
		if !ok {
			continue
		}
		id, err := val.Uint()
		if err != nil {
			return v, fmt.Errorf("%s: tokenizer.ggml.%s_token_id: %w", f.Path, s.key, err)
		}
		if id < uint64(n) {
			*s.id = int32(id)
		}
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"add_space_prefix", &v.AddSpacePrefix}, {"add_bos_token", &v.AddBOS}, {"add_eos_token", &v.AddEOS},
		{"normalizer.lowercase", &v.Lowercase}} {
		if val, ok := f.Lookup("tokenizer.ggml." + b.key); ok {
			if *b.dst, err = val.Bool(); err != nil {
				return v, fmt.Errorf("%s: tokenizer.ggml.%s: %w", f.Path, b.key, err)
			}
		}
	}
	if v.Pre == "gemma4" || v.Pre == "granite-embed-multi-311m" {
		v.AddBOS = true // llama.cpp's Gemma 4 workaround
	}
	v.StripAccents = v.Lowercase
	if val, ok := f.Lookup("tokenizer.ggml.normalizer.strip_accents"); ok {
		if v.StripAccents, err = val.Bool(); err != nil {
			return v, fmt.Errorf("%s: tokenizer.ggml.normalizer.strip_accents: %w", f.Path, err)
		}
	}
	for _, s := range []struct {
		key string
		dst *string
	}{{"general.name", &v.ModelName}, {"general.architecture", &v.Architecture}} {
		if val, ok := f.Lookup(s.key); ok {
			if *s.dst, err = val.Str(); err != nil {
				return v, fmt.Errorf("%s: %s: %w", f.Path, s.key, err)
			}
		}
	}
	return v, nil
}

// TokenizerFromGGUF reads the vocabulary of f and builds its tokenizer.
func TokenizerFromGGUF(f *gguf.File) (Tokenizer, error) {
	v, err := VocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	t, err := NewTokenizer(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return t, nil
}

func stringArray(f *gguf.File, key string) ([]string, error) {
	val, err := f.Get(key)
	if err != nil {
		return nil, err
	}
	a, err := val.StringArray()
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", f.Path, key, err)
	}
	return a, nil
}
