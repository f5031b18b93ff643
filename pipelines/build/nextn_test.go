package build_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/pipelines/build"
)

// nextnFixture writes tiny-qwen35.gguf with a multi-token-prediction block appended, as llama.cpp's
// converter writes Qwen3.5/3.6 by default (block_count counts it, nextn_predict_layers 1): blk.8 holds
// a full-attention block's tensors (copied from blk.3, the fixture's first attention block) and the
// block's own nextn.eh_proj, enorm, hnorm and shared_head_norm; output_norm and output stay last.
// It returns the file and the MTP block's tensor names.
func nextnFixture(t *testing.T) (string, []string) {
	t.Helper()
	ctx := context.Background()
	f, err := gguf.Open(ctx, testfiles.Path(t, "tiny-qwen35.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	h.KV = slices.Clone(h.KV)
	for i, kv := range h.KV {
		if kv.Key == "qwen35.block_count" {
			h.KV[i].Value = gguf.Uint32(9)
		}
	}
	h.KV = append(h.KV, gguf.KV{Key: "qwen35.nextn_predict_layers", Value: gguf.Uint32(1)})
	var trunk, mtp, tail []gguf.TensorInfo
	from := map[string]string{}
	for _, ti := range h.Tensors {
		ti.Offset, ti.Size = 0, 0
		switch {
		case strings.HasPrefix(ti.Name, "output"):
			tail = append(tail, ti)
			continue
		case strings.HasPrefix(ti.Name, "blk.3."):
			name := "blk.8." + strings.TrimPrefix(ti.Name, "blk.3.")
			from[name] = ti.Name
			mtp = append(mtp, gguf.TensorInfo{Name: name, Type: ti.Type, Shape: ti.Shape})
		}
		trunk = append(trunk, ti)
	}
	for _, x := range []struct {
		name  string
		shape []int64
	}{{"blk.8.nextn.eh_proj.weight", []int64{128, 64}}, {"blk.8.nextn.enorm.weight", []int64{64}},
		{"blk.8.nextn.hnorm.weight", []int64{64}}, {"blk.8.nextn.shared_head_norm.weight", []int64{64}}} {
		mtp = append(mtp, gguf.TensorInfo{Name: x.name, Type: gguf.TypeF32, Shape: x.shape})
	}
	h.Tensors = slices.Concat(trunk, mtp, tail)
	path := filepath.Join(t.TempDir(), "qwen35-mtp.gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	r := rand.New(rand.NewPCG(8, 8))
	_, err = gguf.Write(ctx, out, h, func(_ context.Context, _ int, ti gguf.TensorInfo, w io.Writer) error {
		name := ti.Name
		if src, ok := from[name]; ok {
			name = src
		}
		if src, err := f.Tensor(name); err == nil {
			_, err := io.Copy(w, f.Section(src))
			return err
		}
		b := make([]byte, ti.Size)
		for i := 0; i < len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(r.NormFloat64()*0.05)))
		}
		_, err := w.Write(b)
		return err
	})
	if err := errors.Join(err, out.Close()); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range mtp {
		names = append(names, ti.Name)
	}
	return path, names
}

// TestNextNBuild builds the built-in qwen35 recipe (its schemes match blk.N of every block) on a
// Qwen3.5 file with a multi-token-prediction block: the block's tensors are never packed, the stub
// keeps them as the source stores them, the report and summary say so, and the pack is the one the
// same file without that block gives, byte for byte.
func TestNextNBuild(t *testing.T) {
	path, mtp := nextnFixture(t)
	r := newRig(t)
	out := filepath.Join(t.TempDir(), "out")
	buildSmall(t, r, "../recipes/qwen35.yaml", path, out)
	rep := readReport(t, out)
	want, _ := hybridWeights(t, path)
	var got []string
	for _, w := range rep.Weights {
		got = append(got, w.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("packed %v,\nwant the trunk's matmul weights %v", got, want)
	}
	ctx := context.Background()
	src, err := gguf.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	stub, err := gguf.Open(ctx, filepath.Join(out, "qwen35.orkpack.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()
	var bytesMTP int64
	for _, name := range mtp {
		a, _ := src.Tensor(name)
		b, err := stub.Tensor(name)
		if err != nil {
			t.Fatalf("stub: %v", err)
		}
		da, db := make([]byte, a.Size), make([]byte, b.Size)
		if _, err := src.Section(a).ReadAt(da, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := stub.Section(b).ReadAt(db, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(da, db) {
			t.Errorf("stub: %s differs from the source's", name)
		}
		bytesMTP += a.Size
	}
	if n := rep.NextN; n == nil || !slices.Equal(n.Blocks, []int{8}) || n.Tensors != len(mtp) || n.Bytes != bytesMTP {
		t.Errorf("report nextn %+v, want block 8, %d tensors, %d bytes", n, len(mtp), bytesMTP)
	}
	summary, err := os.ReadFile(filepath.Join(out, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(summary), "not packed: the multi-token-prediction block blk.8 (15 tensors, ") {
		t.Errorf("summary says nothing of the multi-token-prediction block:\n%s", summary)
	}
	page, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("not packed (multi-token prediction)")) || !bytes.Contains(page, []byte("blk.8: 15 tensors, ")) {
		t.Error("report.html says nothing of the multi-token-prediction block")
	}

	out0 := filepath.Join(t.TempDir(), "out")
	buildSmall(t, r, "../recipes/qwen35.yaml", testfiles.Path(t, "tiny-qwen35.gguf"), out0)
	if rep0 := readReport(t, out0); rep0.NextN != nil {
		t.Errorf("a file without a multi-token-prediction block: report nextn %+v", rep0.NextN)
	}
	a, err := os.ReadFile(filepath.Join(out, "qwen35.orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out0, "qwen35.orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("the pack differs from the one built from the file without the multi-token-prediction block")
	}
}

// TestNextNSchemeOnly: a scheme that matches only the multi-token-prediction block's tensors is a plan
// error that says so (not "a typo?").
func TestNextNSchemeOnly(t *testing.T) {
	path, _ := nextnFixture(t)
	p := filepath.Join(t.TempDir(), "r.yaml")
	body := "name: r\nsource:\n  model: " + path + "\nschemes:\n  - match: 'blk\\.\\d+\\.(attn_q|ssm_out)\\.weight'\n    method: rtn\n    dtype: I8\n" +
		"  - match: 'blk\\.8\\.ffn_\\w+\\.weight'\n    method: rtn\n    dtype: I8\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := planErr(t, p); !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), "schemes[1]") || !strings.Contains(err.Error(), "multi-token-prediction") {
		t.Errorf("plan error %v, want ErrPlan saying schemes[1] matches only the multi-token-prediction block", err)
	}
}
