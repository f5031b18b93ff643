package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

func TestTokenizeCommand(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "t.txt")
	if err := os.WriteFile(text, []byte(" Hello World!"), 0o644); err != nil {
		t.Fatal(err)
	}
	vocab := testfiles.Path(t, "ggml-vocab-llama-spm.gguf")
	// " Hello World!" is one of llama.cpp's test vectors: 29871 15043 2787 29991 without BOS.
	out, errOut, code := orkpipeExit(t, "tokenize", "--no-bos", vocab, text)
	if code != 0 || out != "29871 15043 2787 29991\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = orkpipeExit(t, "tokenize", vocab, text)
	if code != 0 || out != "1 29871 15043 2787 29991\n" {
		t.Fatalf("with BOS: exit %d, stdout %q", code, out)
	}
	out, _, code = orkpipeExit(t, "--json", "tokenize", vocab, text)
	if code != 0 || out != "[1,29871,15043,2787,29991]\n" {
		t.Fatalf("--json: exit %d, stdout %q", code, out)
	}

	// Standard input, tokenized whole: stories-generated.txt is 20181 tokens with BOS (SOURCES.md).
	f, err := os.Open(testfiles.Path(t, "stories-generated.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	out, errOut, code = orkpipeExit(t, "tokenize", testfiles.Path(t, "stories260K.gguf"), "-")
	if code != 0 {
		t.Fatalf("stdin: exit %d: %s", code, errOut)
	}
	if ids := strings.Fields(out); len(ids) != 20181 || ids[0] != "1" || strings.Count(out, "\n") != 1 {
		t.Fatalf("stdin: %d ids (first %q), want 20181 starting with BOS 1 on one line", len(ids), ids[0])
	}

	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"tokenize", vocab}, exitUsage},
		{[]string{"tokenize", vocab, filepath.Join(dir, "missing.txt")}, exitFailure},
		{[]string{"tokenize", text, text}, exitFailure}, // not a GGUF file
	} {
		if _, errOut, code := orkpipeExit(t, c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, errOut)
		}
	}
}
