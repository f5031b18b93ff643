package model

import (
	"os"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

// benchCorpus is English prose (the calibration and generated stories, ~72 KB) and, separately, the
// multilingual test inputs of llama.cpp's vocab tests repeated to a similar size.
func benchCorpus(b *testing.B) (prose, mixed string) {
	b.Helper()
	var sb strings.Builder
	for _, name := range []string{"stories-calib.txt", "stories-generated.txt"} {
		p, err := os.ReadFile(testfiles.Path(b, name))
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(p)
	}
	inp, err := os.ReadFile(testfiles.Path(b, "ggml-vocab-gpt-2.gguf.inp"))
	if err != nil {
		b.Fatal(err)
	}
	one := strings.ReplaceAll(string(inp), "\n__ggml_vocab_test__\n", " ")
	return sb.String(), strings.Repeat(one, sb.Len()/len(one)+1)
}

// BenchmarkEncode measures tokenizer throughput (MB/s of input text) per vocabulary and corpus.
func BenchmarkEncode(b *testing.B) {
	prose, mixed := benchCorpus(b)
	for _, vocab := range []string{"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"} {
		tok := openTokenizer(b, vocab)
		for _, c := range []struct{ name, text string }{{"prose", prose}, {"mixed", mixed}} {
			b.Run(strings.TrimSuffix(strings.TrimPrefix(vocab, "ggml-vocab-"), ".gguf")+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(c.text)))
				for b.Loop() {
					if _, err := tok.Encode(c.text, true, false); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkPreTokenize measures the pre-tokenizers alone (MB/s of input text): the hand-written
// scanners (GPT2, LLAMA3, QWEN2, QWEN35) and some of the std::regex ones.
func BenchmarkPreTokenize(b *testing.B) {
	prose, mixed := benchCorpus(b)
	for _, name := range []string{"GPT2", "LLAMA3", "QWEN2", "QWEN35", "DEFAULT", "GPT4O", "TEKKEN", "DEEPSEEK3_LLM"} {
		for _, c := range []struct{ name, text string }{{"prose", prose}, {"mixed", mixed}} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(c.text)))
				for b.Loop() {
					pt, _, err := prepareText(c.text)
					if err != nil {
						b.Fatal(err)
					}
					preSpecs()[name].split(pt)
				}
			})
		}
	}
}
