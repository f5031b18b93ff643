package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// TestInspectModel: inspect says what each shared model is as the forward pass reads it (its blocks by
// kind, multi-token-prediction blocks, widths, experts) and, for a file no build can read, why: a
// vocabulary of an architecture not implemented, and a multi-token-prediction draft (tiny-qwen35.gguf
// reduced to what convert_hf_to_gguf.py --mtp keeps).
func TestInspectModel(t *testing.T) {
	draft := rewriteModel(t, "tiny-qwen35.gguf", func(h *gguf.Header) {
		h.KV = append(h.KV[:len(h.KV):len(h.KV)], gguf.KV{Key: "qwen35.nextn_predict_layers", Value: gguf.Uint32(1)})
		var keep []gguf.TensorInfo
		for _, ti := range h.Tensors {
			if !strings.HasPrefix(ti.Name, "blk.") || strings.HasPrefix(ti.Name, "blk.7.") {
				keep = append(keep, ti)
			}
		}
		h.Tensors = keep
	})
	withMTP := rewriteModel(t, "tiny-qwen35.gguf", func(h *gguf.Header) {
		h.KV = append(h.KV[:len(h.KV):len(h.KV)], gguf.KV{Key: "qwen35.nextn_predict_layers", Value: gguf.Uint32(1)})
	})
	for _, c := range []struct{ path, want string }{
		{testfiles.Path(t, "stories260K.gguf"), "model: llama, 5 blocks (5 attention), n_embd 64, vocab 512\n"},
		{testfiles.Path(t, "tiny-qwen35.gguf"), "model: qwen35, 8 blocks (6 deltanet, 2 gated-attention), n_embd 64, vocab 512\n"},
		{withMTP, "model: qwen35, 7 blocks (6 deltanet, 1 gated-attention) + 1 multi-token-prediction block (not packed), n_embd 64, vocab 512\n"},
		{testfiles.Path(t, "tiny-lfm2moe.gguf"), "model: lfm2moe, 6 blocks (2 shortconv, 2 attention+moe, 2 shortconv+moe), n_embd 64, vocab 512, 8 experts, 2 used a token\n"},
		{testfiles.Path(t, "ggml-vocab-gpt-2.gguf"), `model: not readable by the forward pass: ` + testfiles.Path(t, "ggml-vocab-gpt-2.gguf") + `: general.architecture "gpt2": unsupported`},
		{draft, "model: not readable by the forward pass: " + draft + ": qwen35.nextn_predict_layers 1 and no blk.0.attn_norm.weight: the file holds only the multi-token-prediction block blk.7"},
	} {
		var out bytes.Buffer
		if err := runInspectGGUF(context.Background(), newGlobalOptions(&out, &out), c.path); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "\n\n"+c.want) {
			t.Errorf("inspect %s lacks\n%s\nin\n%s", c.path, c.want, headLines(out.String(), 6))
		}
	}

	var out bytes.Buffer
	opts := newGlobalOptions(&out, &out)
	opts.json = true
	if err := runInspectGGUF(context.Background(), opts, withMTP); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Model inspectModel `json:"model"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	m := got.Model
	if m.Arch != "qwen35" || m.Blocks != 7 || m.NextN != 1 || m.Embd != 64 || m.Vocab != 512 || m.Error != "" ||
		len(m.Kinds) != 2 || m.Kinds[0] != (inspectKind{"deltanet", 6}) || m.Kinds[1] != (inspectKind{"gated-attention", 1}) {
		t.Errorf("inspect --json model: %+v", m)
	}
}

// rewriteModel writes a copy of a shared test model with its header edited by edit (each tensor's
// data is the source's) and returns its path.
func rewriteModel(t *testing.T, name string, edit func(*gguf.Header)) string {
	t.Helper()
	ctx := context.Background()
	src, err := gguf.Open(ctx, testfiles.Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	h := src.Header()
	edit(&h)
	path := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := gguf.Write(ctx, f, h, gguf.CopyFrom(src)); err != nil {
		t.Fatal(err)
	}
	return path
}

// headLines is the first n lines of s.
func headLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
