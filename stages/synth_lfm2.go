package stages

import (
	"fmt"
	"slices"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
)

// The lfm2moe synth (SynthParams.Arch "lfm2moe"): llama.cpp's Liquid LFM2 mixture-of-experts hybrid
// in the layout of ../shared/testdata/hybrid/make_tiny.py's tiny-lfm2moe.gguf (TestSynthLFM2MoELayout
// checks tensors, shapes, types and keys against it): per block attn_norm, then either attention
// (attn_q/k/v, attn_q_norm/k_norm, attn_output) or a short convolution (shortconv.in_proj [n_embd,
// 3·n_embd], shortconv.conv [taps, n_embd], shortconv.out_proj), then ffn_norm and either a dense
// SwiGLU FFN (the first leading_dense_block_count blocks) or the router ffn_gate_inp, the expert
// tensors ffn_{gate,up,down}_exps and the selection bias exp_probs_b.bias; the final norm
// token_embd_norm and output. Routers, biases, norms and convolution taps are F32, as in the fixture.

// lfm2RouterGain scales the routers' N(0, 1/n_embd) entries so that their logits have a standard
// deviation of about 2 and the sigmoid scores are well separated (make_tiny.py's router_std 0.25 at
// n_embd 64).
const lfm2RouterGain = 2

// lfm2DefaultConvL is the short convolution's taps when shortconv_l_cache is unset (LFM2's 3).
const lfm2DefaultConvL = 3

// SynthLFM2MoE returns the synth parameters of an LFM2-8B-A1B-shaped lfm2moe model of the first layers
// of its 24 blocks (attention at blocks 2, 6, 10, 14, 18 and 21, the first two dense) with a small
// vocabulary. The widths are ork/board's TestLFM2_8B_A1BOnPaper's: n_embd 2048, n_ff 7168, n_ff_exp
// 1792, 32 experts (top 4), 32 heads of 64 with 8 KV heads, 3 convolution taps.
func SynthLFM2MoE(layers int, typ string, seed uint64) SynthParams {
	var attn []int
	for _, l := range []int{2, 6, 10, 14, 18, 21} {
		if l < layers {
			attn = append(attn, l)
		}
	}
	return SynthParams{Arch: "lfm2moe", Layers: layers, Embd: 2048, FF: 7168, FFExp: 1792, Experts: 32, ExpertsUsed: 4,
		DenseLead: min(2, layers), Heads: 32, HeadsKV: 8, AttnLayers: attn, ShortConvL: lfm2DefaultConvL, Vocab: 512, Ctx: 4096,
		Type: typ, Seed: seed}
}

// lfm2moe reports whether p is an lfm2moe model, with its defaults filled.
func (p SynthParams) lfm2moe() (SynthParams, bool) {
	if p.Arch != "lfm2moe" {
		return p, false
	}
	if p.ShortConvL == 0 {
		p.ShortConvL = lfm2DefaultConvL
	}
	return p, true
}

// attnLayer reports whether block l of an lfm2moe model is attention.
func (p SynthParams) attnLayer(l int) bool { return slices.Contains(p.AttnLayers, l) }

func (p SynthParams) validateLFM2MoE() error {
	switch {
	case p.Layers < 1 || p.Embd < 1 || p.FF < 1 || p.FFExp < 1 || p.Heads < 1 || p.HeadsKV < 1 || p.Ctx < 1:
		return fmt.Errorf("lfm2moe: layers, n_embd, n_ff, n_ff_exp, n_head, n_head_kv, ctx: want positive, got %+v", p)
	case p.Embd%p.Heads != 0 || p.Heads%p.HeadsKV != 0 || (p.Embd/p.Heads)%2 != 0:
		return fmt.Errorf("lfm2moe: n_embd %d must divide by n_head %d into an even head width, and n_head by n_head_kv %d", p.Embd, p.Heads, p.HeadsKV)
	case p.Experts < 2 || p.Experts > 256 || p.ExpertsUsed < 1 || p.ExpertsUsed > p.Experts:
		return fmt.Errorf("lfm2moe: n_expert %d, n_expert_used %d: want 2..256 experts and 1..n_expert of them per token", p.Experts, p.ExpertsUsed)
	case p.DenseLead < 0 || p.DenseLead > p.Layers:
		return fmt.Errorf("lfm2moe: leading_dense_block_count %d: want 0..layers (%d)", p.DenseLead, p.Layers)
	case p.ShortConvL < 1:
		return fmt.Errorf("lfm2moe: shortconv_l_cache %d: want positive", p.ShortConvL)
	case p.HeadDim != 0 || p.FullAttnInterval != 0 || p.SSMConv != 0 || p.SSMHeadDim != 0 || p.SSMKHeads != 0 || p.SSMVHeads != 0:
		return fmt.Errorf("lfm2moe: head_dim, full_attention_interval and ssm_* are qwen35 parameters (the head width is n_embd/n_head)")
	case p.Vocab < synthMinVocab || p.Vocab > 1<<20:
		return fmt.Errorf("vocab %d: want %d..%d (specials, byte tokens and printable pieces)", p.Vocab, synthMinVocab, 1<<20)
	}
	for i, l := range p.AttnLayers {
		if l < 0 || l >= p.Layers || i > 0 && l <= p.AttnLayers[i-1] {
			return fmt.Errorf("lfm2moe: attention_layers %v: want increasing block indices below layers (%d)", p.AttnLayers, p.Layers)
		}
	}
	t, err := gguf.ParseType(p.Type)
	if err != nil || (t != gguf.TypeF32 && t != gguf.TypeF16 && t != gguf.TypeBF16 && t != gguf.TypeQ8_0) {
		return fmt.Errorf("type %q: want F32, F16, BF16 or Q8_0", p.Type)
	}
	if t == gguf.TypeQ8_0 {
		for _, k := range []struct {
			name string
			v    int
		}{{"n_embd", p.Embd}, {"n_ff", p.FF}, {"n_ff_exp", p.FFExp}} {
			if k.v%32 != 0 {
				return fmt.Errorf("type Q8_0 needs every matrix's input width to be a multiple of 32: %s is %d", k.name, k.v)
			}
		}
	}
	return nil
}

// lfm2moeConfig is Config of an lfm2moe model whose block weights are held as wt.
func (p SynthParams) lfm2moeConfig(wt gguf.Type) model.Config {
	hd := p.Embd / p.Heads
	kinds := make([]model.LayerKind, p.Layers)
	kv := 0
	for l := range kinds {
		kinds[l] = model.LayerKind{Mixer: model.MixerShortConv, FFN: model.FFNDense}
		if p.attnLayer(l) {
			kinds[l].Mixer, kv = model.MixerAttention, p.HeadsKV
		}
		if l >= p.DenseLead {
			kinds[l].FFN = model.FFNMoE
		}
	}
	return model.Config{Arch: "lfm2moe", NEmbd: p.Embd, NFF: p.FF, NLayer: p.Layers, NHead: p.Heads, NHeadKV: kv, HeadDim: hd,
		NVocab: p.Vocab, RopeDim: hd, RopeBase: 1e6, RopeFreqScale: 1, RopeNeox: true, NormEps: 1e-5, NExpert: p.Experts,
		NExpertUsed: p.ExpertsUsed, NFFExp: p.FFExp, Gating: model.GatingSigmoid, ExpertBias: true, Kinds: kinds,
		ShortConvL: p.ShortConvL, WeightType: wt}
}

// lfm2moeTensors is Tensors of an lfm2moe model, in make_tiny.py's order.
func (p SynthParams) lfm2moeTensors() []gguf.TensorInfo {
	wt, _ := gguf.ParseType(p.Type)
	f32 := gguf.TypeF32
	e, f, fx, x, v := int64(p.Embd), int64(p.FF), int64(p.FFExp), int64(p.Experts), int64(p.Vocab)
	hd := e / int64(p.Heads)
	kv := hd * int64(p.HeadsKV)
	ts := []gguf.TensorInfo{{Name: "token_embd.weight", Type: wt, Shape: []int64{e, v}}}
	for l := 0; l < p.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts, gguf.TensorInfo{Name: b + "attn_norm.weight", Type: f32, Shape: []int64{e}})
		if p.attnLayer(l) {
			ts = append(ts,
				gguf.TensorInfo{Name: b + "attn_q.weight", Type: wt, Shape: []int64{e, e}},
				gguf.TensorInfo{Name: b + "attn_k.weight", Type: wt, Shape: []int64{e, kv}},
				gguf.TensorInfo{Name: b + "attn_v.weight", Type: wt, Shape: []int64{e, kv}},
				gguf.TensorInfo{Name: b + "attn_q_norm.weight", Type: f32, Shape: []int64{hd}},
				gguf.TensorInfo{Name: b + "attn_k_norm.weight", Type: f32, Shape: []int64{hd}},
				gguf.TensorInfo{Name: b + "attn_output.weight", Type: wt, Shape: []int64{e, e}})
		} else {
			ts = append(ts,
				gguf.TensorInfo{Name: b + "shortconv.in_proj.weight", Type: wt, Shape: []int64{e, 3 * e}},
				gguf.TensorInfo{Name: b + "shortconv.conv.weight", Type: f32, Shape: []int64{int64(p.ShortConvL), e}},
				gguf.TensorInfo{Name: b + "shortconv.out_proj.weight", Type: wt, Shape: []int64{e, e}})
		}
		ts = append(ts, gguf.TensorInfo{Name: b + "ffn_norm.weight", Type: f32, Shape: []int64{e}})
		if l < p.DenseLead {
			ts = append(ts,
				gguf.TensorInfo{Name: b + "ffn_gate.weight", Type: wt, Shape: []int64{e, f}},
				gguf.TensorInfo{Name: b + "ffn_up.weight", Type: wt, Shape: []int64{e, f}},
				gguf.TensorInfo{Name: b + "ffn_down.weight", Type: wt, Shape: []int64{f, e}})
			continue
		}
		ts = append(ts,
			gguf.TensorInfo{Name: b + "ffn_gate_inp.weight", Type: f32, Shape: []int64{e, x}},
			gguf.TensorInfo{Name: b + "ffn_gate_exps.weight", Type: wt, Shape: []int64{e, fx, x}},
			gguf.TensorInfo{Name: b + "ffn_up_exps.weight", Type: wt, Shape: []int64{e, fx, x}},
			gguf.TensorInfo{Name: b + "ffn_down_exps.weight", Type: wt, Shape: []int64{fx, e, x}},
			gguf.TensorInfo{Name: b + "exp_probs_b.bias", Type: f32, Shape: []int64{x}})
	}
	return append(ts,
		gguf.TensorInfo{Name: "token_embd_norm.weight", Type: f32, Shape: []int64{e}},
		gguf.TensorInfo{Name: "output.weight", Type: wt, Shape: []int64{e, v}})
}

// synthKVLFM2MoE is synthKV of an lfm2moe model: llama.cpp's lfm2moe keys (those of the fixture) and
// the same tokenizer. attention.head_count_kv holds one value per block, 0 for a convolution block.
func synthKVLFM2MoE(p SynthParams) []gguf.KV {
	a := func(k string) string { return "lfm2moe." + k }
	kv := make([]int32, p.Layers)
	for l := range kv {
		if p.attnLayer(l) {
			kv[l] = int32(p.HeadsKV)
		}
	}
	return append(append(hybridHeadKV("lfm2moe", p), []gguf.KV{
		{Key: a("expert_feed_forward_length"), Value: gguf.Uint32(uint32(p.FFExp))},
		{Key: a("expert_count"), Value: gguf.Uint32(uint32(p.Experts))},
		{Key: a("expert_used_count"), Value: gguf.Uint32(uint32(p.ExpertsUsed))},
		{Key: a("expert_gating_func"), Value: gguf.Uint32(uint32(model.GatingSigmoid))},
		{Key: a("expert_weights_norm"), Value: gguf.Bool(true)},
		{Key: a("leading_dense_block_count"), Value: gguf.Uint32(uint32(p.DenseLead))},
		{Key: a("attention.head_count"), Value: gguf.Uint32(uint32(p.Heads))},
		{Key: a("attention.head_count_kv"), Value: gguf.Int32s(kv)},
		{Key: a("attention.layer_norm_rms_epsilon"), Value: gguf.Float32(1e-5)},
		{Key: a("rope.dimension_count"), Value: gguf.Uint32(uint32(p.Embd / p.Heads))},
		{Key: a("rope.freq_base"), Value: gguf.Float32(1e6)},
		{Key: a("shortconv.l_cache"), Value: gguf.Uint32(uint32(p.ShortConvL))},
	}...), synthTokenizerKV(p.Vocab)...)
}
