package build_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/pipelines/build"
)

// TestPlanRefusesShard: the first shard of a model llama-gguf-split wrote as two files (the model's
// metadata and its first 60 tensors) is refused when the recipe is planned, naming the file and what
// to do, even for a recipe that needs no calibration and no screen (which would otherwise pack the
// shard's weights alone and pass its checks).
func TestPlanRefusesShard(t *testing.T) {
	ctx := context.Background()
	f, err := gguf.Open(ctx, testfiles.Path(t, "tiny-qwen35.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	h.KV = append(h.KV[:len(h.KV):len(h.KV)], gguf.KV{Key: gguf.SplitNoKey, Value: gguf.Uint16(0)},
		gguf.KV{Key: gguf.SplitCountKey, Value: gguf.Uint16(2)}, gguf.KV{Key: "split.tensors.count", Value: gguf.Int32(int32(len(h.Tensors)))})
	h.Tensors = h.Tensors[:60]
	shard := filepath.Join(t.TempDir(), "q-00001-of-00002.gguf")
	out, err := os.Create(shard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = gguf.Write(ctx, out, h, func(_ context.Context, i int, _ gguf.TensorInfo, w io.Writer) error {
		_, err := io.Copy(w, f.Section(f.Tensors[i]))
		return err
	})
	if err := errors.Join(err, out.Close()); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "r.yaml")
	body := "name: r\nsource:\n  model: " + shard + "\nschemes:\n  - match: 'blk\\.\\d+\\.(attn_q|ssm_out|ffn_down)\\.weight'\n    method: rtn\n    dtype: I8\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	err = planErr(t, p)
	if !errors.Is(err, build.ErrPlan) || !errors.Is(err, model.ErrSplitModel) || !strings.Contains(err.Error(), shard) ||
		!strings.Contains(err.Error(), "llama-gguf-split --merge") {
		t.Errorf("plan error %v; want ErrPlan wrapping model.ErrSplitModel, naming the shard and the merge", err)
	}
}
