package model

import (
	"fmt"
	"sort"
	"strings"
)

// tokenAttr is llama.cpp's llama_token_attr.
type tokenAttr uint16

const (
	attrUnknown     tokenAttr = 1 << 0
	attrUnused      tokenAttr = 1 << 1
	attrNormal      tokenAttr = 1 << 2
	attrControl     tokenAttr = 1 << 3
	attrUserDefined tokenAttr = 1 << 4
	attrByte        tokenAttr = 1 << 5
	attrLStrip      tokenAttr = 1 << 7
	attrRStrip      tokenAttr = 1 << 8
)

// vocabIndex is what all tokenizers share: text -> id, token attributes, and the special-token
// partitioning.
type vocabIndex struct {
	v       *Vocab
	toID    map[string]int32
	attrs   []tokenAttr
	special []int32 // control, user-defined and unknown tokens, longest text first
}

func newVocabIndex(v *Vocab) *vocabIndex {
	x := &vocabIndex{v: v, toID: make(map[string]int32, len(v.Tokens)), attrs: make([]tokenAttr, len(v.Tokens))}
	for i := range v.Tokens {
		x.toID[tokenText(v, i)] = int32(i) // a later duplicate wins, as in llama.cpp
		x.attrs[i] = attrNormal
		if v.Types != nil {
			x.attrs[i] = typeAttr(v.Types[i])
		}
	}
	x.adjustAttrs()
	for i := range v.Tokens {
		if x.attrs[i]&(attrControl|attrUserDefined|attrUnknown) != 0 {
			x.special = append(x.special, int32(i))
		}
	}
	sort.SliceStable(x.special, func(a, b int) bool {
		return len(tokenText(v, int(x.special[a]))) > len(tokenText(v, int(x.special[b])))
	})
	x.stripAttrs()
	return x
}

// tokenText is the text llama.cpp keys token i by: an empty token becomes "[EMPTY_i]".
func tokenText(v *Vocab, i int) string {
	if v.Tokens[i] == "" {
		return fmt.Sprintf("[EMPTY_%d]", i)
	}
	return v.Tokens[i]
}

func typeAttr(t TokenType) tokenAttr {
	switch t {
	case TokenUnknown:
		return attrUnknown
	case TokenUnused:
		return attrUnused
	case TokenNormal:
		return attrNormal
	case TokenControl:
		return attrControl
	case TokenUserDefined:
		return attrUserDefined
	case TokenByte:
		return attrByte
	}
	return 0 // undefined
}

// Texts llama.cpp's llama_vocab::impl::load recognises.
var (
	// fimTexts: a token with one of these texts is the FIM token of its role when GGUF gives none.
	fimTexts = [fimRoles][]string{
		{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"},
		{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"},
		{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"},
		{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
		{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
		{"<|file_sep|>"},
	}
	// eogTexts end generation; llama.cpp makes them control tokens (this covers its EOT and EOM lists).
	eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
		"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
		"<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["}
	// alwaysRendered are made user-defined (llama.cpp's gpt-oss workaround).
	alwaysRendered = []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}
)

// adjustAttrs applies llama.cpp's text-based attribute changes, in its order.
func (x *vocabIndex) adjustAttrs() {
	set := func(text string, f func(a tokenAttr) tokenAttr) {
		if id, ok := x.toID[text]; ok {
			x.attrs[id] = f(x.attrs[id])
		}
	}
	control := func(a tokenAttr) tokenAttr { return a | attrControl }
	has := func(text string) bool { _, ok := x.toID[text]; return ok }
	// An absent FIM id is found by text, and that token becomes a control token. llama.cpp takes
	// the first match in its hash map's order; with several candidates this takes the lowest id.
	for role, texts := range fimTexts {
		if x.v.FIM[role] != NoToken {
			continue
		}
		best := NoToken
		for _, t := range texts {
			if id, ok := x.toID[t]; ok && (best == NoToken || id < best) {
				best = id
			}
		}
		if best != NoToken {
			x.attrs[best] |= attrControl
		}
	}
	for _, t := range eogTexts {
		set(t, control)
	}
	for _, t := range alwaysRendered {
		set(t, func(tokenAttr) tokenAttr { return attrUserDefined })
	}
	// o200k_harmony and solar-open: "<|end|>" is not end-of-generation there.
	call := has("<|call|>") || has("<|calls|>")
	if has("<|end|>") && (has("<|return|>") && call || call && has("<|flush|>")) {
		set("<|end|>", func(tokenAttr) tokenAttr { return attrUserDefined })
	}
	// gemma4 and paddleocr: "</s>" is a normal token.
	if has("<|tool_response>") && has("</s>") {
		set("</s>", func(tokenAttr) tokenAttr { return attrNormal })
	}
}

// stripAttrs sets llama.cpp's per-model whitespace stripping around special tokens.
func (x *vocabIndex) stripAttrs() {
	containsAny := func(s string, subs ...string) bool {
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				return true
			}
		}
		return false
	}
	set := func(text string, a tokenAttr, on bool) {
		if id, ok := x.toID[text]; ok {
			if on {
				x.attrs[id] |= a
			} else {
				x.attrs[id] &^= a
			}
		}
	}
	name := strings.ToLower(x.v.ModelName)
	switch {
	case containsAny(x.v.Pre, "jina-v2-de", "jina-v2-es", "jina-v2-code") || containsAny(x.v.Architecture, "nomic-bert-moe", "jina-bert-v3"):
		set("<mask>", attrLStrip, true)
	case containsAny(name, "phi-3", "phi3"):
		for _, id := range x.special {
			x.attrs[id] |= attrRStrip
		}
		set("</s>", attrRStrip, true)
		for _, t := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			set(t, attrRStrip, false)
		}
	case containsAny(name, "modern-bert"):
		set("[MASK]", attrLStrip, true)
	}
}

func (x *vocabIndex) Vocab() *Vocab { return x.v }

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
// tokenizer_st_partition does. Control and unknown tokens are only split out when parseSpecial is
// set; whitespace next to a token with lstrip/rstrip is dropped.
func (x *vocabIndex) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{text: text, token: NoToken}}
	for _, id := range x.special {
		a := x.attrs[id]
		if !parseSpecial && a&(attrControl|attrUnknown) != 0 {
			continue
		}
		st := tokenText(x.v, int(id))
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
				left := rest[:i]
				if a&attrLStrip != 0 {
					left = strings.TrimRight(left, cSpace)
				}
				if left != "" {
					out = append(out, fragment{text: left, token: NoToken})
				}
				out = append(out, fragment{token: id})
				rest = rest[i+len(st):]
				if a&attrRStrip != 0 {
					rest = strings.TrimLeft(rest, cSpace)
				}
			}
		}
		frags = out
	}
	return frags
}

// cSpace is C's isspace in the "C" locale.
const cSpace = " \t\n\v\f\r"
