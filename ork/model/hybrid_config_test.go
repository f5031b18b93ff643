package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

func TestConfigFromGGUFHybrid(t *testing.T) {
	ctx := context.Background()
	open := func(name string) Config {
		f, err := gguf.Open(ctx, testfiles.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		c, err := ConfigFromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	q := open("tiny-qwen35.gguf")
	if q.NLayer != 8 || q.NEmbd != 64 || q.NFF != 192 || q.NHead != 4 || q.NHeadKV != 2 || q.HeadDim != 32 || q.RopeDim != 8 ||
		q.RopeBase != 1e7 || !q.RopeNeox || !slices.Equal(q.RopeSections, []int{2, 1, 1, 0}) || q.NormEps != 1e-6 ||
		q.SSM != (SSMShape{ConvKernel: 4, HeadDim: 16, KHeads: 2, VHeads: 6}) || q.NVocab != 512 {
		t.Errorf("qwen35 config %+v", q)
	}
	var kinds []string
	for l := 0; l < q.NLayer; l++ {
		kinds = append(kinds, q.Kind(l).Mixer.String())
	}
	if want := "deltanet deltanet deltanet gated-attention deltanet deltanet deltanet gated-attention"; strings.Join(kinds, " ") != want {
		t.Errorf("qwen35 mixers %v, want %s", kinds, want)
	}
	if got, want := siteNames(&q, 0), []string{"attn_qkv", "ssm_out", "ffn_gate_up", "ffn_down"}; !slices.Equal(got, want) {
		t.Errorf("qwen35 DeltaNet sites %v, want %v", got, want)
	}
	if s := q.Sites(0)[InputQKV]; len(s.Weights) != 4 || s.Weights[0] != (Matmul{"attn_qkv", 160}) || s.Weights[3] != (Matmul{"ssm_beta", 6}) {
		t.Errorf("qwen35 DeltaNet input site %+v", s)
	}
	if s := q.Sites(3)[InputQKV]; s.Weights[0] != (Matmul{"attn_q", 256}) || q.Sites(3)[InputAttnO].Width != 128 {
		t.Errorf("qwen35 gated attention sites %+v", q.Sites(3))
	}

	m := open("tiny-lfm2moe.gguf")
	if m.NLayer != 6 || m.NFF != 160 || m.NFFExp != 96 || m.NExpert != 8 || m.NExpertUsed != 2 || m.Gating != GatingSigmoid ||
		!m.ExpertBias || m.ShortConvL != 3 || m.NHeadKV != 2 || m.HeadDim != 16 || m.RopeDim != 16 || m.RopeBase != 1e6 {
		t.Errorf("lfm2moe config %+v", m)
	}
	kinds = nil
	for l := 0; l < m.NLayer; l++ {
		kinds = append(kinds, m.Kind(l).Mixer.String()+"/"+m.Kind(l).FFN.String())
	}
	if want := "shortconv/dense shortconv/dense attention/moe shortconv/moe shortconv/moe attention/moe"; strings.Join(kinds, " ") != want {
		t.Errorf("lfm2moe kinds %v, want %s", kinds, want)
	}
	if got, want := siteNames(&m, 3), []string{"shortconv.in_proj", "shortconv.out_proj", "ffn_gate_up_exps*", "ffn_down_exps*", "ffn_gate_inp"}; !slices.Equal(got, want) {
		t.Errorf("lfm2moe conv/MoE sites %v, want %v", got, want)
	}
	if l, in, w, ok := m.SiteOf("blk.4.ffn_down_exps.weight#7"); !ok || l != 4 || in != InputDown || w.N != 64 || m.Sites(4)[in].Width != 96 {
		t.Errorf("SiteOf(blk.4.ffn_down_exps.weight#7) = %d %d %+v %v", l, in, w, ok)
	}
}

// variant writes a copy of a shared test model with its metadata edited by edit and returns its path.
func variant(t *testing.T, name string, edit func([]gguf.KV) []gguf.KV) string {
	t.Helper()
	return rewritten(t, name, func(h *gguf.Header) { h.KV = edit(slices.Clone(h.KV)) })
}

func without(key string) func([]gguf.KV) []gguf.KV {
	return func(kv []gguf.KV) []gguf.KV {
		return slices.DeleteFunc(kv, func(x gguf.KV) bool { return x.Key == key })
	}
}

func with(key string, v gguf.Value) func([]gguf.KV) []gguf.KV {
	return func(kv []gguf.KV) []gguf.KV {
		kv = slices.DeleteFunc(kv, func(x gguf.KV) bool { return x.Key == key })
		return append(kv, gguf.KV{Key: key, Value: v})
	}
}

// TestConfigFromGGUFHybridRefuses checks that a missing or unimplemented value is an error naming
// the file's key.
func TestConfigFromGGUFHybridRefuses(t *testing.T) {
	for _, c := range []struct {
		file string
		edit func([]gguf.KV) []gguf.KV
		key  string
		is   error
	}{
		{"tiny-qwen35.gguf", without("qwen35.ssm.conv_kernel"), "qwen35.ssm.conv_kernel", gguf.ErrKeyNotFound},
		{"tiny-qwen35.gguf", without("qwen35.rope.dimension_sections"), "qwen35.rope.dimension_sections", ErrBadModel},
		{"tiny-qwen35.gguf", without("qwen35.attention.layer_norm_rms_epsilon"), "qwen35.attention.layer_norm_rms_epsilon", gguf.ErrKeyNotFound},
		{"tiny-qwen35.gguf", with("qwen35.ssm.inner_size", gguf.Uint32(95)), "ssm.inner_size", ErrBadModel},
		{"tiny-qwen35.gguf", with("qwen35.ssm.group_count", gguf.Uint32(4)), "time_step_rank", ErrBadModel},
		{"tiny-qwen35.gguf", with("qwen35.attention.value_length", gguf.Uint32(16)), "value_length", ErrUnsupported},
		{"tiny-qwen35.gguf", with("qwen35.nextn_predict_layers", gguf.Uint32(8)), "nextn_predict_layers", ErrBadModel},
		{"tiny-lfm2moe.gguf", without("lfm2moe.expert_gating_func"), "lfm2moe.expert_gating_func", gguf.ErrKeyNotFound},
		{"tiny-lfm2moe.gguf", with("lfm2moe.expert_gating_func", gguf.Uint32(3)), "expert_gating_func 3", ErrUnsupported},
		{"tiny-lfm2moe.gguf", without("lfm2moe.shortconv.l_cache"), "lfm2moe.shortconv.l_cache", gguf.ErrKeyNotFound},
		{"tiny-lfm2moe.gguf", with("lfm2moe.attention.sliding_window", gguf.Uint32(4096)), "sliding_window", ErrUnsupported},
		{"tiny-lfm2moe.gguf", with("lfm2moe.attention.head_count_kv", gguf.Int32s([]int32{0, 0, 2, 0, 0, 4})), "head_count_kv", ErrUnsupported},
		{"tiny-lfm2moe.gguf", with("lfm2moe.attention.head_count_kv", gguf.Int32s([]int32{0, 0, 2})), "head_count_kv", ErrBadModel},
		{"tiny-lfm2moe.gguf", with("general.architecture", gguf.String("lfm3")), "lfm3", ErrUnsupported},
		{"tiny-lfm2moe.gguf", with("lfm2moe.attention.causal", gguf.Bool(false)), "attention.causal", ErrUnsupported},
		{"tiny-lfm2moe.gguf", with("lfm2moe.expert_group_count", gguf.Uint32(2)), "expert_group_count", ErrUnsupported},
		// A block count no file of these tensors can hold (2e9 sized the per-block slices past any memory).
		{"tiny-qwen35.gguf", with("qwen35.block_count", gguf.Uint32(1_000_000)), "1000000 blocks, but the file holds 109 tensors", ErrBadModel},
		{"stories260K.gguf", with("llama.block_count", gguf.Uint32(49)), "49 blocks, but the file holds 48 tensors", ErrBadModel},
		// One shard of a model llama-gguf-split wrote as two files (its metadata, some tensors).
		{"tiny-qwen35.gguf", func(kv []gguf.KV) []gguf.KV {
			return with(gguf.SplitCountKey, gguf.Uint16(2))(with(gguf.SplitNoKey, gguf.Uint16(0))(kv))
		}, "split.count 2", ErrSplitModel},
		{"stories260K.gguf", func(kv []gguf.KV) []gguf.KV {
			return with(gguf.SplitCountKey, gguf.Uint16(3))(with(gguf.SplitNoKey, gguf.Uint16(1))(kv))
		}, "shard 2 of 3", ErrSplitModel},
	} {
		path := variant(t, c.file, c.edit)
		f, err := gguf.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ConfigFromGGUF(f)
		f.Close()
		if err == nil || !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s edited for %s: error %v, want one naming %s and the file, wrapping %v", c.file, c.key, err, c.key, c.is)
		} else {
			t.Logf("%v", err)
		}
	}
}

// TestTensorsMatchFiles checks Config.Tensors against the fixtures' tensor tables (every listed tensor
// exists with that shape, and no block tensor is left out), and LayerWeightBytes against the bytes the
// blocks' tensors take in the file: equal for files whose matmul weights share one encoding (F32, F16;
// routers and the other tensors are float32 in every file).
func TestTensorsMatchFiles(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"tiny-qwen35.gguf", "tiny-qwen35-f16.gguf", "tiny-lfm2moe.gguf", "tiny-lfm2moe-f16.gguf", "stories260K.gguf"} {
		f, err := gguf.Open(ctx, testfiles.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ConfigFromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, ts := range c.Tensors() {
			listed[ts.Name] = true
			ti, err := f.Tensor(ts.Name)
			if err != nil {
				t.Errorf("%s: listed tensor %s: %v", name, ts.Name, err)
				continue
			}
			if len(ti.Shape) != len(ts.Shape) {
				t.Errorf("%s: %s has shape %v, listed %v", name, ts.Name, ti.Shape, ts.Shape)
				continue
			}
			for i := range ts.Shape {
				if ti.Shape[i] != int64(ts.Shape[i]) {
					t.Errorf("%s: %s has shape %v, listed %v", name, ts.Name, ti.Shape, ts.Shape)
				}
			}
		}
		fileBytes := make([]int64, c.NLayer)
		for _, ti := range f.Tensors {
			if !strings.HasPrefix(ti.Name, "blk.") {
				continue
			}
			if !listed[ti.Name] {
				t.Errorf("%s: tensor %s is not listed", name, ti.Name)
			}
			var l int
			if _, err := fmt.Sscanf(ti.Name, "blk.%d.", &l); err == nil {
				fileBytes[l] += ti.Size
			}
		}
		for l := range fileBytes {
			got := c.LayerWeightBytes(l)
			if c.Arch == "llama" {
				got -= 4 * int64(2*c.HeadDim+c.QDim()+2*c.KVDim()) // optional norms and biases stories260K lacks
			}
			if got != fileBytes[l] {
				t.Errorf("%s: block %d: LayerWeightBytes %d, the file's tensors %d bytes", name, l, got, fileBytes[l])
			}
		}
		f.Close()
	}
}

// TestSyntheticHybrid runs synthetic qwen35- and lfm2moe-shaped models (the fixtures' shapes) through a
// forward pass: every tensor the blocks read is generated, and the logits are finite.
func TestSyntheticHybrid(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"tiny-qwen35.gguf", "tiny-lfm2moe.gguf"} {
		f, err := gguf.Open(ctx, testfiles.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ConfigFromGGUF(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		src, err := NewSyntheticSource(c, 7)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewModel(c, src)
		if err != nil {
			t.Fatal(err)
		}
		toks := make([]int32, 200)
		for i := range toks {
			toks[i] = int32(i * 37 % c.NVocab)
		}
		logits, err := m.Forward(ctx, toks)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range logits {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s shape: logit %d is %v", name, i, v)
			}
		}
	}
}

// TestConfigNextN: qwen35's nextn_predict_layers are multi-token-prediction blocks at the end of
// block_count: NLayer counts the trunk only, NextN those blocks; without the key there are none.
func TestConfigNextN(t *testing.T) {
	for _, c := range []struct {
		edit         func([]gguf.KV) []gguf.KV
		layers, next int
	}{
		{func(kv []gguf.KV) []gguf.KV { return kv }, 8, 0},
		{with("qwen35.nextn_predict_layers", gguf.Uint32(1)), 7, 1},
		{with("qwen35.nextn_predict_layers", gguf.Uint32(0)), 8, 0},
	} {
		f, err := gguf.Open(context.Background(), variant(t, "tiny-qwen35.gguf", c.edit))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ConfigFromGGUF(f)
		f.Close()
		if err != nil || cfg.NLayer != c.layers || cfg.NextN != c.next {
			t.Errorf("NLayer %d, NextN %d (%v); want %d, %d", cfg.NLayer, cfg.NextN, err, c.layers, c.next)
		}
	}
}
