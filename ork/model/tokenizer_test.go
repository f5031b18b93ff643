package model

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// readVocabTests reads llama.cpp's tokenizer test vectors: inputs separated by "\n__ggml_vocab_test__\n",
// expected ids one line per input.
func readVocabTests(t *testing.T, base string) (inputs []string, want [][]int32) {
	t.Helper()
	inp, err := os.ReadFile(testfiles.Path(t, base+".inp"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(testfiles.Path(t, base+".out"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	s := string(inp)
	for {
		i := strings.Index(s, sep)
		if i < 0 {
			break
		}
		inputs = append(inputs, s[:i])
		s = s[i+len(sep):]
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%s: %d inputs but %d output lines", base, len(inputs), len(lines))
	}
	for _, l := range lines {
		var ids []int32
		for _, f := range strings.Fields(l) {
			n, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s.out: %v", base, err)
			}
			ids = append(ids, int32(n))
		}
		want = append(want, ids)
	}
	return inputs, want
}

func openTokenizer(t testing.TB, name string) Tokenizer {
	t.Helper()
	f, err := gguf.Open(context.Background(), testfiles.Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tok, err := TokenizerFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTokenizerVectors(t *testing.T) {
	for _, name := range []string{"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"} {
		t.Run(name, func(t *testing.T) {
			tok := openTokenizer(t, name)
			inputs, want := readVocabTests(t, name)
			if len(inputs) != 46 {
				t.Fatalf("%d test inputs, want 46", len(inputs))
			}
			for i, in := range inputs {
				got, err := tok.Encode(in, false, false)
				if err != nil {
					t.Fatalf("case %d %q: %v", i, in, err)
				}
				if !equalIDs(got, want[i]) {
					t.Errorf("case %d %q:\n got %v\nwant %v", i, in, got, want[i])
				}
			}
		})
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
