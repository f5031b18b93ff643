package model

import (
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"orkpipe/internal/testfiles"
)

// FuzzEncode tokenizes arbitrary text with both test vocabularies. Every input must tokenize (except,
// for GPT-2's BPE, invalid UTF-8 whose lenient decoding gives a code point beyond Unicode: it refuses
// that with ErrBadText, as llama.cpp does), and the token pieces must spell the input back:
// SentencePiece "▁" + text with spaces as "▁" (byte tokens <0xNN> standing for their byte), GPT-2 the
// byte-encoded text. SentencePiece tokenization cut into segments must equal llama.cpp's merge of the
// whole text.
func FuzzEncode(f *testing.F) {
	spmTok := openTokenizer(f, "ggml-vocab-llama-spm.gguf")
	gpt := openTokenizer(f, "ggml-vocab-gpt-2.gguf")
	if b, err := os.ReadFile(testfiles.Path(f, "ggml-vocab-llama-spm.gguf.inp")); err == nil {
		for _, s := range strings.Split(string(b), "\n__ggml_vocab_test__\n") {
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := spmTok.Encode(s, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(s, "<s>") && !strings.Contains(s, "</s>") && !strings.Contains(s, "<unk>") && s != "" {
			sp := spmTok.(*spm)
			ses := &spmSession{t: sp, cache: map[string][]int32{}, q: bigramHeap[spmBigram]{before: spmBefore}}
			whole, err := ses.tokenize(strings.ReplaceAll(" "+s, " ", "\u2581"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !equalIDs(ids, whole) {
				t.Fatalf("segmented %v, whole text %v", ids, whole)
			}
		}
		if utf8.ValidString(s) && s != "" {
			var b strings.Builder
			v := spmTok.Vocab()
			for _, id := range ids {
				p := v.Tokens[id]
				if v.Types[id] == TokenByte {
					var x byte
					for _, c := range p[3:5] {
						x = x*16 + byte(strings.IndexRune("0123456789ABCDEF", c))
					}
					b.WriteByte(x)
					continue
				}
				b.WriteString(p)
			}
			if want := strings.ReplaceAll(" "+s, " ", "\u2581"); b.String() != want {
				t.Fatalf("SPM pieces spell %q, want %q", b.String(), want)
			}
		}
		ids, err = gpt.Encode(s, false, false)
		if errors.Is(err, ErrBadText) && !utf8.ValidString(s) {
			// Invalid UTF-8 whose lenient decoding gives a code point beyond U+10FFFF: BPE
			// refuses it, as llama.cpp's does (TestDecodeCpt); valid text never fails.
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(s) {
			var b strings.Builder
			for _, id := range ids {
				b.WriteString(gpt.Vocab().Tokens[id])
			}
			if want := byteEncode(s); b.String() != want {
				t.Fatalf("GPT-2 pieces spell %q, want %q", b.String(), want)
			}
		}
	})
}
