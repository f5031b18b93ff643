package model

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// readVocabTests reads llama.cpp's tokenizer test vectors as its tests/test-tokenizer-0.cpp does:
// inputs separated by "\n__ggml_vocab_test__\n" in path+".inp", expected ids one line per input in
// path+".out" (produced with add_special and parse_special false).
func readVocabTests(t testing.TB, path string) (inputs []string, want [][]int32) {
	t.Helper()
	inp, err := os.ReadFile(path + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(path + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	for s := string(inp); s != ""; {
		i := strings.Index(s, sep)
		if i < 0 {
			inputs = append(inputs, s)
			break
		}
		inputs = append(inputs, s[:i])
		s = s[i+len(sep):]
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%s: %d inputs but %d output lines", path, len(inputs), len(lines))
	}
	for _, l := range lines {
		var ids []int32
		for _, f := range strings.Fields(l) {
			n, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s.out: %v", path, err)
			}
			ids = append(ids, int32(n))
		}
		want = append(want, ids)
	}
	return inputs, want
}

func openTokenizerAt(t testing.TB, path string) Tokenizer {
	t.Helper()
	f, err := gguf.Open(context.Background(), path)
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

func openTokenizer(t testing.TB, name string) Tokenizer {
	t.Helper()
	return openTokenizerAt(t, testfiles.Path(t, name))
}

// checkVectors encodes every input of a vocab test and reports each mismatch; it returns the
// number of cases that pass.
func checkVectors(t *testing.T, tok Tokenizer, path string) (pass, total int) {
	t.Helper()
	inputs, want := readVocabTests(t, path)
	for i, in := range inputs {
		got, err := tok.Encode(in, false, false)
		if err != nil {
			t.Errorf("case %d %q: %v", i, in, err)
			continue
		}
		if !equalIDs(got, want[i]) {
			t.Errorf("case %d %q:\n got %v\nwant %v", i, in, got, want[i])
			continue
		}
		pass++
	}
	return pass, len(inputs)
}

// TestTokenizerVectors runs llama.cpp's test vectors of the two vocabularies in the shared test data.
func TestTokenizerVectors(t *testing.T) {
	for _, name := range []string{"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"} {
		t.Run(name, func(t *testing.T) {
			tok := openTokenizer(t, name)
			pass, total := checkVectors(t, tok, testfiles.Path(t, name))
			if total != 46 {
				t.Fatalf("%d test inputs, want 46", total)
			}
			t.Logf("%d/%d cases pass", pass, total)
		})
	}
}

// TestLlamaVocabVectors runs every vocab test of llama.cpp's models/ folder, given by
// ORKPIPE_LLAMA_MODELS (e.g. /work/ref/llama.cpp/models; the vocab files are 1-10 MB each and not
// part of the shared test data). A test whose .gguf is absent is skipped, saying so.
func TestLlamaVocabVectors(t *testing.T) {
	dir := os.Getenv("ORKPIPE_LLAMA_MODELS")
	if dir == "" {
		testfiles.SkipOptional(t, "ORKPIPE_LLAMA_MODELS is not set: set it to llama.cpp's models/ folder to run its vocab tests")
	}
	inps, err := filepath.Glob(filepath.Join(dir, "ggml-vocab-*.gguf.inp"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inps) == 0 {
		t.Fatalf("%s: no ggml-vocab-*.gguf.inp files", dir)
	}
	for _, inp := range inps {
		path := strings.TrimSuffix(inp, ".inp")
		t.Run(filepath.Base(path), func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				testfiles.SkipOptional(t, "%s is absent (only its test vectors are present): %v", filepath.Base(path), err)
			}
			pass, total := checkVectors(t, openTokenizerAt(t, path), path)
			t.Logf("%d/%d cases pass", pass, total)
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

// TestLlamaTokenizeCrossCheck compares Encode with llama.cpp's llama_tokenize on every vocabulary in
// ORKPIPE_LLAMA_MODELS (including those without test vectors) for the pre-tokenizer golden inputs
// (testdata/pretok: multilingual, invalid UTF-8, special-token texts), with and without add_special
// and parse_special. ORKPIPE_LLAMA_TOK is a program built against llama.cpp (not kept here) that reads
// `VOCAB.gguf ADD_SPECIAL PARSE_SPECIAL` (0/1) as arguments and inputs on stdin separated as in
// llama.cpp's .inp files ("\n__ggml_vocab_test__\n"), loads the GGUF vocabulary only, and prints per
// input one line: llama_tokenize's ids separated by spaces, or ERR when it fails.
func TestLlamaTokenizeCrossCheck(t *testing.T) {
	dir, tool := os.Getenv("ORKPIPE_LLAMA_MODELS"), os.Getenv("ORKPIPE_LLAMA_TOK")
	if dir == "" || tool == "" {
		testfiles.SkipOptional(t, "ORKPIPE_LLAMA_MODELS and ORKPIPE_LLAMA_TOK are not both set: see this test's doc comment")
	}
	g := readPretokGolden(t)
	const sep = "\n__ggml_vocab_test__\n"
	var inputs []string
	var stdin strings.Builder
	for _, in := range g.Inputs {
		if len(in) == 0 || strings.Contains(string(in), sep) {
			continue
		}
		inputs = append(inputs, string(in))
		stdin.WriteString(string(in) + sep)
	}
	for _, special := range []string{"<|endoftext|>", "<s>x</s>", "a<unk>b", "[CLS] [SEP] [MASK]", "<|im_end|>\n<|fim_prefix|>"} {
		inputs = append(inputs, special)
		stdin.WriteString(special + sep)
	}
	vocabs, err := filepath.Glob(filepath.Join(dir, "ggml-vocab-*.gguf"))
	if err != nil || len(vocabs) == 0 {
		t.Fatalf("%s: no ggml-vocab-*.gguf (%v)", dir, err)
	}
	modes := []struct{ add, parse bool }{{false, false}, {true, false}, {true, true}}
	for _, path := range vocabs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			crossCheck(t, tool, path, inputs, stdin.String(), modes)
		})
	}
	// The GPT-2 vocabulary under every other pre-tokenizer name (and models gemma4, whitespace):
	// every type's flags (ignore_merges, byte encoding, whitespace escaping, BOS) end to end.
	names := make([]string, 0, len(preNames()))
	for n := range preNames() {
		if n != "" && n != "gpt-2" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, name := range append(names, "model=gemma4") {
		t.Run("gpt-2-as-"+name, func(t *testing.T) {
			model := "gpt2"
			switch name {
			case "whitespace": // with model gpt2, llama.cpp asserts on a merge lookup of a space
				model = "whitespace"
			case "model=gemma4":
				model = "gemma4"
			}
			path := rewriteVocab(t, filepath.Join(dir, "ggml-vocab-gpt-2.gguf"), model, name)
			crossCheck(t, tool, path, inputs, stdin.String(), []struct{ add, parse bool }{modes[0], modes[2]})
		})
	}
}

// rewriteVocab writes a copy of the vocabulary at src with tokenizer.ggml.model and .pre replaced.
func rewriteVocab(t *testing.T, src, model, pre string) string {
	t.Helper()
	f, err := gguf.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	kv := make([]gguf.KV, 0, len(h.KV))
	for _, e := range h.KV {
		switch e.Key {
		case "tokenizer.ggml.model":
			e.Value = gguf.String(model)
		case "tokenizer.ggml.pre":
			e.Value = gguf.String(pre)
		}
		kv = append(kv, e)
	}
	h.KV = kv
	path := filepath.Join(t.TempDir(), "vocab.gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gguf.Write(context.Background(), out, h, gguf.CopyFrom(f)); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// crossCheck runs llama_tok on the inputs and compares its ids with Encode's in each mode.
func crossCheck(t *testing.T, tool, path string, inputs []string, stdin string, modes []struct{ add, parse bool }) {
	t.Helper()
	tok := openTokenizerAt(t, path)
	flag := map[bool]string{false: "0", true: "1"}
	for _, mode := range modes {
		cmd := exec.Command(tool, path, flag[mode.add], flag[mode.parse])
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(lines) != len(inputs) {
			t.Fatalf("llama_tok printed %d lines for %d inputs", len(lines), len(inputs))
		}
		pass := 0
		for i, in := range inputs {
			got, err := tok.Encode(in, mode.add, mode.parse)
			if lines[i] == "ERR" {
				if err == nil {
					t.Errorf("add=%v parse=%v %q: llama.cpp fails, Encode gives %v", mode.add, mode.parse, in, got)
				} else {
					pass++
				}
				continue
			}
			var want []int32
			for _, f := range strings.Fields(lines[i]) {
				n, _ := strconv.Atoi(f)
				want = append(want, int32(n))
			}
			if err != nil || !equalIDs(got, want) {
				t.Errorf("add=%v parse=%v %q:\n got %v (%v)\nwant %v", mode.add, mode.parse, in, got, err, want)
				continue
			}
			pass++
		}
		t.Logf("add_special=%v parse_special=%v: %d/%d inputs match llama.cpp", mode.add, mode.parse, pass, len(inputs))
	}
}
