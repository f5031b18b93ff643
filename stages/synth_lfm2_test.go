package stages_test

import (
	"slices"
	"strings"
	"testing"

	"orkpipe/stages"
)

// TestSynthLFM2MoELayout: an lfm2moe synth model with the widths of ../shared/testdata/tiny-lfm2moe.gguf
// (written by llama.cpp's gguf-py, loaded by llama.cpp) has the fixture's tensors in its order with the
// same shapes, every lfm2moe.* key of the fixture with the same value, and F32 exactly where the
// fixture's F16 variant keeps F32; the LFM2-8B-A1B-shaped parameters validate and plan the shapes
// ork/board's TestLFM2_8B_A1BOnPaper counts (704 experts in 22 MoE blocks, 6 attention blocks).
func TestSynthLFM2MoELayout(t *testing.T) {
	checkSynthLayout(t, "tiny-lfm2moe", "lfm2moe.", stages.SynthParams{Arch: "lfm2moe", Layers: 6, Embd: 64, FF: 160, FFExp: 96, Experts: 8,
		ExpertsUsed: 2, DenseLead: 2, Heads: 4, HeadsKV: 2, AttnLayers: []int{2, 5}, Vocab: 512, Ctx: 4096, Type: "F16", Seed: 1})
	big := stages.SynthLFM2MoE(24, "Q8_0", 1)
	if err := big.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"blk.0.shortconv.in_proj.weight": {2048, 6144}, "blk.0.shortconv.conv.weight": {3, 2048},
		"blk.1.ffn_down.weight": {7168, 2048}, "blk.2.attn_q.weight": {2048, 2048}, "blk.2.attn_k.weight": {2048, 512},
		"blk.21.attn_output.weight": {2048, 2048}, "blk.2.ffn_gate_exps.weight": {2048, 1792, 32},
		"blk.23.ffn_down_exps.weight": {1792, 2048, 32}, "blk.23.exp_probs_b.bias": {32}}
	var attn, moe, params int64
	for _, ti := range big.Tensors() {
		params += ti.Elements()
		switch {
		case strings.HasSuffix(ti.Name, ".attn_q.weight"):
			attn++
		case strings.HasSuffix(ti.Name, "_exps.weight"):
			moe++
		}
		if w, ok := want[ti.Name]; ok {
			if !slices.Equal(ti.Shape, w) {
				t.Errorf("8B-shaped %s: %v, want %v", ti.Name, ti.Shape, w)
			}
			delete(want, ti.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("8B-shaped model lacks %v", want)
	}
	if attn != 6 || moe != 22*3 {
		t.Errorf("8B-shaped model: %d attention blocks and %d expert tensors, want 6 and 66", attn, moe)
	}
	t.Logf("LFM2-8B-A1B-shaped synth: %.3fB parameters with a %d-token vocabulary", float64(params)/1e9, big.Vocab)
}

func TestSynthLFM2MoEValidate(t *testing.T) {
	ok := stages.SynthLFM2MoE(4, "Q8_0", 1)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		mod  func(p *stages.SynthParams)
		msg  string
	}{
		{"lfm2moe field without arch", func(p *stages.SynthParams) { p.Arch = "" }, "set without arch: lfm2moe"},
		{"lfm2moe field on qwen35", func(p *stages.SynthParams) { p.Arch = "qwen35" }, "set without arch: lfm2moe"},
		{"no experts", func(p *stages.SynthParams) { p.Experts, p.ExpertsUsed = 0, 0 }, "n_expert 0"},
		{"used above experts", func(p *stages.SynthParams) { p.ExpertsUsed = 33 }, "n_expert_used 33"},
		{"attention block out of range", func(p *stages.SynthParams) { p.AttnLayers = []int{2, 4} }, "attention_layers [2 4]"},
		{"attention blocks unordered", func(p *stages.SynthParams) { p.AttnLayers = []int{3, 2} }, "attention_layers [3 2]"},
		{"dense lead above layers", func(p *stages.SynthParams) { p.DenseLead = 5 }, "leading_dense_block_count 5"},
		{"qwen35 field", func(p *stages.SynthParams) { p.HeadDim = 64 }, "qwen35 parameters"},
		{"Q8_0 width", func(p *stages.SynthParams) { p.FFExp = 1800 }, "n_ff_exp is 1800"},
		{"router skew", func(p *stages.SynthParams) { p.RouterSkew = 1 }, "not of arch llama"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ok
			p.AttnLayers = slices.Clone(ok.AttnLayers)
			c.mod(&p)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("Validate: %v, want an error saying %q", err, c.msg)
			}
		})
	}
}
