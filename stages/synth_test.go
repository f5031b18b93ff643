package stages_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/stages"
)

// TestSynthQwen35Layout: a qwen35 synth model with the widths of ../shared/testdata/tiny-qwen35.gguf
// (written by llama.cpp's gguf-py, loaded by llama.cpp) has the fixture's tensors in its order with
// the same shapes, every qwen35.* key of the fixture with the same value, and F32 exactly where the
// fixture's F16 variant keeps F32; the 27B-shaped parameters validate and plan the Qwen3.6-27B shapes.
func TestSynthQwen35Layout(t *testing.T) {
	checkSynthLayout(t, "tiny-qwen35", "qwen35.", stages.SynthParams{Arch: "qwen35", Layers: 8, Embd: 64, FF: 192, Heads: 4, HeadsKV: 2,
		HeadDim: 32, Vocab: 512, Ctx: 4096, Type: "F16", Seed: 1, FullAttnInterval: 4, SSMConv: 4, SSMHeadDim: 16, SSMKHeads: 2, SSMVHeads: 6})
	big := stages.SynthQwen35(4, "Q8_0", 1)
	if err := big.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"blk.0.attn_qkv.weight": {5120, 10240}, "blk.0.attn_gate.weight": {5120, 6144}, "blk.0.ssm_alpha.weight": {5120, 48},
		"blk.0.ssm_out.weight": {6144, 5120}, "blk.3.attn_q.weight": {5120, 12288}, "blk.3.attn_k.weight": {5120, 1024},
		"blk.3.attn_output.weight": {6144, 5120}, "blk.3.ffn_down.weight": {17408, 5120}}
	for _, ti := range big.Tensors() {
		if w, ok := want[ti.Name]; ok {
			if !slices.Equal(ti.Shape, w) {
				t.Errorf("27B-shaped %s: %v, want %v", ti.Name, ti.Shape, w)
			}
			delete(want, ti.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("27B-shaped model lacks %v", want)
	}
}

func TestSynthQwen35Validate(t *testing.T) {
	ok := stages.SynthQwen35(2, "Q8_0", 1)
	for _, c := range []struct {
		name string
		mod  func(p *stages.SynthParams)
		msg  string
	}{
		{"unknown arch", func(p *stages.SynthParams) { p.Arch = "mamba" }, `arch "mamba"`},
		{"qwen35 field without arch", func(p *stages.SynthParams) { p.Arch = "" }, "set without arch: qwen35"},
		{"value heads not a multiple", func(p *stages.SynthParams) { p.SSMVHeads = 20 }, "multiple of the key heads"},
		{"odd head dim", func(p *stages.SynthParams) { p.HeadDim = 12 }, "head_dim 12"},
		{"Q8_0 width", func(p *stages.SynthParams) { p.SSMHeadDim = 9 }, "ssm_time_step_rank·ssm_state_size is 432"},
		{"experts", func(p *stages.SynthParams) { p.Experts, p.ExpertsUsed = 4, 2 }, "dense FFNs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ok
			c.mod(&p)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("Validate: %v, want an error saying %q", err, c.msg)
			}
		})
	}
}

// TestSynthConfig: SynthParams.Config is what model.ConfigFromGGUF reads from the file synth writes
// (llama, llama MoE, qwen35, lfm2moe with and without attention blocks; F32, F16 and Q8_0), so a build
// plans a synthetic source exactly.
func TestSynthConfig(t *testing.T) {
	q := stages.SynthParams{Arch: "qwen35", Layers: 5, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 32, Vocab: 400, Ctx: 64, Type: "Q8_0", Seed: 2,
		SSMHeadDim: 16, SSMKHeads: 2, SSMVHeads: 4}
	for _, p := range []stages.SynthParams{
		{Layers: 2, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, Vocab: 360, Ctx: 64, Type: "F16", Seed: 1},
		{Layers: 2, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, Vocab: 360, Ctx: 64, Type: "F32", Seed: 1, Experts: 4, ExpertsUsed: 2},
		q,
		{Arch: "lfm2moe", Layers: 4, Embd: 64, FF: 96, FFExp: 64, Experts: 4, ExpertsUsed: 2, DenseLead: 1, Heads: 4, HeadsKV: 2,
			AttnLayers: []int{1, 3}, Vocab: 400, Ctx: 64, Type: "Q8_0", Seed: 2},
		{Arch: "lfm2moe", Layers: 2, Embd: 64, FF: 96, FFExp: 32, Experts: 2, ExpertsUsed: 1, Heads: 2, HeadsKV: 1, ShortConvL: 4,
			Vocab: 360, Ctx: 64, Type: "F16", Seed: 3},
	} {
		raw, _ := json.Marshal(p)
		t.Run(string(raw), func(t *testing.T) {
			path := mustExec(t, "synth", string(raw), nil)["model.gguf"]
			f, err := gguf.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := model.ConfigFromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			if want := p.Config(); !reflect.DeepEqual(got, want) {
				t.Errorf("ConfigFromGGUF of the file:\n%+v\nSynthParams.Config:\n%+v", got, want)
			}
		})
	}
}

// checkSynthLayout synthesizes p (type F16) and checks it against ../shared/testdata/<fixture>.gguf and
// its F16 variant <fixture>-f16.gguf: the same tensors in the same order with the same shapes, F32 exactly
// where the F16 variant keeps F32, and every key of the fixture that starts with prefix (and
// general.architecture) with the same value.
func checkSynthLayout(t *testing.T, fixture, prefix string, p stages.SynthParams) {
	t.Helper()
	ctx := context.Background()
	open := func(name string) *gguf.File {
		f, err := gguf.Open(ctx, testfiles.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	ref, ref16 := open(fixture+".gguf"), open(fixture+"-f16.gguf")
	raw, _ := json.Marshal(p)
	got, err := gguf.Open(ctx, mustExec(t, "synth", string(raw), nil)["model.gguf"])
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if len(got.Tensors) != len(ref.Tensors) {
		t.Fatalf("%d tensors, %s has %d", len(got.Tensors), fixture, len(ref.Tensors))
	}
	for i, g := range got.Tensors {
		r, r16 := ref.Tensors[i], ref16.Tensors[i]
		if g.Name != r.Name || !slices.Equal(g.Shape, r.Shape) || g.Type != r16.Type {
			t.Errorf("tensor %d: %s %v %s, %s's %s %v (F16 variant: %s)", i, g.Name, g.Shape, g.Type, fixture, r.Name, r.Shape, r16.Type)
		}
	}
	for _, kv := range ref.KV {
		if !strings.HasPrefix(kv.Key, prefix) && kv.Key != "general.architecture" {
			continue
		}
		v, ok := got.Lookup(kv.Key)
		if !ok {
			t.Errorf("key %s missing", kv.Key)
			continue
		}
		if a, b := fmt.Sprint(v), fmt.Sprint(kv.Value); a != b {
			t.Errorf("key %s = %s, %s's %s", kv.Key, a, fixture, b)
		}
	}
}
