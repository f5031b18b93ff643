package build_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/pipelines/build"
)

// TestPlanRefusesPartialModel: a source file that lacks tensors the model's forward pass reads is
// refused when the recipe is planned, naming the file and what is wrong, even for a recipe that needs
// no calibration and no screen (which would otherwise pack the weights the file has and pass its
// checks): the first shard of a model llama-gguf-split wrote as two files (the metadata and the first
// 60 tensors), a multi-token-prediction draft (the MTP block alone, as convert_hf_to_gguf.py --mtp
// writes it), and a file missing one FFN weight.
func TestPlanRefusesPartialModel(t *testing.T) {
	ctx := context.Background()
	f, err := gguf.Open(ctx, testfiles.Path(t, "tiny-qwen35.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		name string
		edit func(*gguf.Header)
		is   error
		want []string
	}{
		{"shard", func(h *gguf.Header) {
			h.KV = append(h.KV[:len(h.KV):len(h.KV)], gguf.KV{Key: gguf.SplitNoKey, Value: gguf.Uint16(0)},
				gguf.KV{Key: gguf.SplitCountKey, Value: gguf.Uint16(2)}, gguf.KV{Key: "split.tensors.count", Value: gguf.Int32(int32(len(h.Tensors)))})
			h.Tensors = h.Tensors[:60]
		}, model.ErrSplitModel, []string{"shard 1 of 2", "llama-gguf-split --merge"}},
		{"draft", func(h *gguf.Header) { // convert_hf_to_gguf.py --mtp: the embeddings, the output and blk.7 only
			h.KV = append(h.KV[:len(h.KV):len(h.KV)], gguf.KV{Key: "qwen35.nextn_predict_layers", Value: gguf.Uint32(1)})
			h.Tensors = slices.DeleteFunc(slices.Clone(h.Tensors), func(ti gguf.TensorInfo) bool {
				return strings.HasPrefix(ti.Name, "blk.") && !strings.HasPrefix(ti.Name, "blk.7.")
			})
		}, model.ErrDraftModel, []string{"only the multi-token-prediction block blk.7", "--mtp"}},
		{"missing", func(h *gguf.Header) {
			h.Tensors = slices.DeleteFunc(slices.Clone(h.Tensors), func(ti gguf.TensorInfo) bool { return ti.Name == "blk.5.ffn_up.weight" })
		}, model.ErrBadModel, []string{"blk.5.ffn_up.weight missing"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := f.Header()
			c.edit(&h)
			src := filepath.Join(t.TempDir(), c.name+".gguf")
			out, err := os.Create(src)
			if err != nil {
				t.Fatal(err)
			}
			_, err = gguf.Write(ctx, out, h, gguf.CopyFrom(f))
			if err := errors.Join(err, out.Close()); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "r.yaml")
			body := "name: r\nsource:\n  model: " + src + "\nschemes:\n  - match: 'blk\\.\\d+\\.(attn_q|ssm_out|ffn_down)\\.weight'\n    method: rtn\n    dtype: I8\n"
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			err = planErr(t, p)
			if !errors.Is(err, build.ErrPlan) || !errors.Is(err, c.is) || !strings.Contains(err.Error(), src) {
				t.Fatalf("plan error %v; want ErrPlan wrapping %v, naming the file", err, c.is)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("plan error %v; want it to say %q", err, w)
				}
			}
		})
	}
}
