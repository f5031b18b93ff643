package model

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// retabled writes a copy of a shared test model whose tensor table edit changed and returns its path.
func retabled(t *testing.T, name string, edit func([]gguf.TensorInfo) []gguf.TensorInfo) string {
	t.Helper()
	return rewritten(t, name, func(h *gguf.Header) { h.Tensors = edit(slices.Clone(h.Tensors)) })
}

// rewritten writes a copy of a shared test model with its header edited by edit (a tensor's data is
// the source's, cut to its new size, or zeros for a tensor the source lacks) and returns its path.
func rewritten(t *testing.T, name string, edit func(*gguf.Header)) string {
	t.Helper()
	ctx := context.Background()
	src, err := gguf.Open(ctx, testfiles.Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	h := src.Header()
	edit(&h)
	path := filepath.Join(t.TempDir(), "rewritten.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = gguf.Write(ctx, f, h, func(_ context.Context, _ int, ti gguf.TensorInfo, w io.Writer) error {
		var r io.Reader = strings.NewReader(strings.Repeat("\x00", int(ti.Size)))
		if st, err := src.Tensor(ti.Name); err == nil && st.Size >= ti.Size {
			r = io.LimitReader(src.Section(st), ti.Size)
		}
		_, err := io.Copy(w, r)
		return err
	})
	if err := errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckTensors: every fixture holds the tensors its forward pass reads; a file without output.weight
// (tied embeddings) passes; one missing a block tensor, one with MoE experts fused as ffn_gate_up_exps
// (llama.cpp's converter's --fuse-gate-up-exps, which this forward does not read) and one with a
// tensor of another shape are refused, naming the file and the tensors.
func TestCheckTensors(t *testing.T) {
	check := func(path string) error {
		t.Helper()
		f, err := gguf.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		c, err := ConfigFromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.CheckTensors(f)
	}
	for _, name := range []string{"stories260K.gguf", "stories260K-Q8_0.gguf", "llama-2-tiny-random.gguf", "tiny-qwen35.gguf",
		"tiny-qwen35-q8_0.gguf", "tiny-qwen35-f16.gguf", "tiny-lfm2moe.gguf", "tiny-lfm2moe-q8_0.gguf", "tiny-lfm2moe-f16.gguf"} {
		if err := check(testfiles.Path(t, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	drop := func(names ...string) func([]gguf.TensorInfo) []gguf.TensorInfo {
		return func(ts []gguf.TensorInfo) []gguf.TensorInfo {
			return slices.DeleteFunc(ts, func(ti gguf.TensorInfo) bool { return slices.Contains(names, ti.Name) })
		}
	}
	if err := check(retabled(t, "stories260K.gguf", drop("output.weight"))); err != nil {
		t.Errorf("tied embeddings: %v", err)
	}
	fuse := func(ts []gguf.TensorInfo) []gguf.TensorInfo {
		var out []gguf.TensorInfo
		for _, ti := range ts {
			switch {
			case strings.HasSuffix(ti.Name, ".ffn_gate_exps.weight"):
				ti.Name = strings.Replace(ti.Name, "ffn_gate_exps", "ffn_gate_up_exps", 1)
				ti.Shape = []int64{ti.Shape[0], 2 * ti.Shape[1], ti.Shape[2]}
			case strings.HasSuffix(ti.Name, ".ffn_up_exps.weight"):
				continue
			}
			out = append(out, ti)
		}
		return out
	}
	reshape := func(ts []gguf.TensorInfo) []gguf.TensorInfo {
		for i := range ts {
			if ts[i].Name == "blk.1.attn_k.weight" {
				ts[i].Shape = []int64{ts[i].Shape[0], ts[i].Shape[1] / 2}
			}
		}
		return ts
	}
	for _, c := range []struct {
		name, file string
		edit       func([]gguf.TensorInfo) []gguf.TensorInfo
		want       []string
	}{
		{"missing", "tiny-qwen35.gguf", drop("blk.5.ffn_up.weight", "blk.6.ssm_a"), []string{"2 of the tensors", "blk.5.ffn_up.weight missing", "blk.6.ssm_a missing"}},
		{"fused experts", "tiny-lfm2moe.gguf", fuse, []string{"8 of the tensors", "blk.2.ffn_gate_exps.weight missing; blk.2.ffn_up_exps.weight missing", "and 4 more"}},
		{"reshaped", "stories260K.gguf", reshape, []string{"blk.1.attn_k.weight has shape [64 16], want [64 32]"}},
	} {
		path := retabled(t, c.file, c.edit)
		err := check(path)
		if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want ErrBadModel naming %s", c.name, err, path)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", c.name, err, w)
			}
		}
	}
}
