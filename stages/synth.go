package stages

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
)

// SynthParams are the parameters of "synth": the shape, tensor type and seed of a deterministic
// synthetic llama-family GGUF. The same parameters always give the same bytes.
type SynthParams struct {
	Layers  int    `json:"layers"`
	Embd    int    `json:"n_embd"`
	FF      int    `json:"n_ff"`
	Heads   int    `json:"n_head"`
	HeadsKV int    `json:"n_head_kv"`
	Vocab   int    `json:"vocab"`
	Ctx     int    `json:"ctx"`
	Type    string `json:"type"` // F32, F16, BF16 or Q8_0 (matmul weights and embeddings; norms are F32)
	Seed    uint64 `json:"seed"`
	// Experts > 0 gives every block a mixture-of-experts FFN in llama.cpp's llama-arch layout (KV
	// llama.expert_count and llama.expert_used_count = ExpertsUsed; tensors ffn_gate_inp, the F32
	// router [n_embd, n_expert], and ffn_gate_exps/ffn_up_exps [n_embd, n_ff, n_expert] and
	// ffn_down_exps [n_ff, n_embd, n_expert] in GGUF ne order, instead of ffn_gate/up/down).
	// Zero (dense) leaves the parameters, and so the node key, as they were.
	Experts     int `json:"n_expert,omitempty"`
	ExpertsUsed int `json:"n_expert_used,omitempty"`
	// RouterSkew > 0 biases the routing on purpose (synth_skew.go): the experts of each block get
	// Zipf-like popularity of exponent about RouterSkew. Zero leaves the parameters as they were.
	RouterSkew float64 `json:"router_skew,omitempty"`
	// Arch "qwen35" writes llama.cpp's Qwen3.5 dense hybrid instead of a llama model (empty: llama, and
	// the parameters and node key stay as they were): every FullAttnInterval-th block (default 4) is
	// gated full attention (Heads query heads of HeadDim, attn_q holding each head's query and gate,
	// HeadsKV key/value heads, q/k norms, rope on HeadDim/4 dimensions), the others Gated DeltaNet
	// blocks (attn_qkv, attn_gate, ssm_conv1d, ssm_dt.bias, ssm_a, ssm_beta, ssm_alpha, ssm_norm,
	// ssm_out) of SSMKHeads query/key heads and SSMVHeads value heads of SSMHeadDim and a causal
	// convolution of SSMConv taps (default 4); every block has a dense FFN. Layout and value ranges
	// follow ../shared/testdata/hybrid/make_tiny.py. At Qwen3.6-27B's widths: n_embd 5120, n_ff 17408,
	// 24 heads of 256 with 4 KV heads, DeltaNet 16 key heads and 48 value heads of 128.
	Arch             string `json:"arch,omitempty"`
	HeadDim          int    `json:"head_dim,omitempty"`
	FullAttnInterval int    `json:"full_attention_interval,omitempty"`
	SSMConv          int    `json:"ssm_conv_kernel,omitempty"`
	SSMHeadDim       int    `json:"ssm_state_size,omitempty"`
	SSMKHeads        int    `json:"ssm_group_count,omitempty"`
	SSMVHeads        int    `json:"ssm_time_step_rank,omitempty"`
	// Arch "lfm2moe" writes llama.cpp's Liquid LFM2 mixture-of-experts hybrid (synth_lfm2.go): the
	// blocks listed in AttnLayers are attention (Heads query heads of n_embd/n_head, HeadsKV key/value
	// heads, q/k norms, neox RoPE over the head), the others short convolution blocks of ShortConvL
	// taps (default 3); the first DenseLead blocks have a dense FFN of FF, the rest Experts routed
	// experts of FFExp (ExpertsUsed per token, sigmoid gating with a selection bias). At
	// LFM2-8B-A1B's widths ([SynthLFM2MoE]): n_embd 2048, n_ff 7168, n_ff_exp 1792, 32 experts (top
	// 4), 2 dense blocks, 32 heads with 8 KV heads, attention at blocks 2, 6, 10, 14, 18 and 21 of 24.
	FFExp      int   `json:"n_ff_exp,omitempty"`
	DenseLead  int   `json:"leading_dense_block_count,omitempty"`
	AttnLayers []int `json:"attention_layers,omitempty"`
	ShortConvL int   `json:"shortconv_l_cache,omitempty"`
}

// SynthQwen35 returns the synth parameters of a Qwen3.6-27B-shaped qwen35 model of layers blocks
// (every fourth one full attention) with a small vocabulary.
func SynthQwen35(layers int, typ string, seed uint64) SynthParams {
	return SynthParams{Arch: "qwen35", Layers: layers, Embd: 5120, FF: 17408, Heads: 24, HeadsKV: 4, HeadDim: 256, Vocab: 512, Ctx: 4096,
		Type: typ, Seed: seed, FullAttnInterval: 4, SSMConv: 4, SSMHeadDim: 128, SSMKHeads: 16, SSMVHeads: 48}
}

// Config returns the model config ConfigFromGGUF reads from the model synth writes (TestSynthConfig
// checks it), so that a build can plan a synthetic source without generating it. p must be valid.
func (p SynthParams) Config() model.Config {
	wt, _ := gguf.ParseType(p.Type)
	if !model.KeepsEncoded(wt) {
		wt = gguf.TypeF32
	}
	if l, ok := p.lfm2moe(); ok {
		return l.lfm2moeConfig(wt)
	}
	q, ok := p.qwen35()
	if !ok {
		hd := p.Embd / p.Heads
		return model.Config{Arch: "llama", NEmbd: p.Embd, NFF: p.FF, NLayer: p.Layers, NHead: p.Heads, NHeadKV: p.HeadsKV, HeadDim: hd,
			NVocab: p.Vocab, RopeDim: hd, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5, NExpert: p.Experts, NExpertUsed: p.ExpertsUsed,
			WeightType: wt}
	}
	kinds := make([]model.LayerKind, q.Layers)
	for l := range kinds {
		kinds[l] = model.LayerKind{Mixer: model.MixerDeltaNet, FFN: model.FFNDense}
		if q.attention(l) {
			kinds[l].Mixer = model.MixerGatedAttention
		}
	}
	var sections []int
	for _, v := range q.ropeSections() {
		sections = append(sections, int(v))
	}
	return model.Config{Arch: "qwen35", NEmbd: q.Embd, NFF: q.FF, NLayer: q.Layers, NHead: q.Heads, NHeadKV: q.HeadsKV, HeadDim: q.HeadDim,
		NVocab: q.Vocab, RopeDim: q.ropeDim(), RopeBase: 1e7, RopeFreqScale: 1, RopeNeox: true, RopeSections: sections, NormEps: 1e-6,
		Kinds: kinds, SSM: model.SSMShape{ConvKernel: q.SSMConv, HeadDim: q.SSMHeadDim, KHeads: q.SSMKHeads, VHeads: q.SSMVHeads}, WeightType: wt}
}

// qwen35 reports whether p is a qwen35 model, with its defaults filled.
func (p SynthParams) qwen35() (SynthParams, bool) {
	if p.Arch != "qwen35" {
		return p, false
	}
	if p.FullAttnInterval == 0 {
		p.FullAttnInterval = 4
	}
	if p.SSMConv == 0 {
		p.SSMConv = 4
	}
	return p, true
}

// attention reports whether block l of a qwen35 model is full attention (llama.cpp:
// (l+1) % full_attention_interval == 0).
func (p SynthParams) attention(l int) bool { return (l+1)%p.FullAttnInterval == 0 }

// ropeDim and ropeSections are qwen35's partial rotary (a quarter of the head) and its sections:
// rope_dim/2 pairs split into three near-equal parts and a zero, as Qwen3.5's [11, 11, 10, 0].
func (p SynthParams) ropeDim() int { return p.HeadDim / 4 }

func (p SynthParams) ropeSections() []int32 {
	t := int32(p.ropeDim() / 2)
	s := []int32{t / 3, t / 3, t / 3, 0}
	for i := int32(0); i < t%3; i++ {
		s[i]++
	}
	return s
}

// synthMinVocab is the smallest vocabulary synth builds: 3 specials, 256 byte tokens and the
// printable ASCII pieces.
const synthMinVocab = 3 + 256 + 1 + 94

// Validate checks the shape.
func (p SynthParams) Validate() error {
	if err := p.validateSkew(); err != nil {
		return err
	}
	if p.Arch != "lfm2moe" && (p.FFExp != 0 || p.DenseLead != 0 || p.AttnLayers != nil || p.ShortConvL != 0) {
		return fmt.Errorf("n_ff_exp, leading_dense_block_count, attention_layers and shortconv_l_cache: lfm2moe parameters, set without arch: lfm2moe")
	}
	if l, ok := p.lfm2moe(); ok {
		return l.validateLFM2MoE()
	}
	if q, ok := p.qwen35(); ok {
		return q.validateQwen35()
	}
	if p.Arch != "" {
		return fmt.Errorf("arch %q: want empty (llama), qwen35 or lfm2moe", p.Arch)
	}
	if p.HeadDim != 0 || p.FullAttnInterval != 0 || p.SSMConv != 0 || p.SSMHeadDim != 0 || p.SSMKHeads != 0 || p.SSMVHeads != 0 {
		return fmt.Errorf("head_dim, full_attention_interval and ssm_*: qwen35 parameters, set without arch: qwen35")
	}
	switch {
	case p.Layers < 1 || p.Embd < 1 || p.FF < 1 || p.Heads < 1 || p.HeadsKV < 1 || p.Ctx < 1:
		return fmt.Errorf("layers, n_embd, n_ff, n_head, n_head_kv, ctx: want positive, got %+v", p)
	case p.Embd%p.Heads != 0 || p.Heads%p.HeadsKV != 0:
		return fmt.Errorf("n_embd %d must divide by n_head %d and n_head by n_head_kv %d", p.Embd, p.Heads, p.HeadsKV)
	case (p.Embd/p.Heads)%2 != 0:
		return fmt.Errorf("head dim %d must be even (RoPE pairs)", p.Embd/p.Heads)
	case p.Experts < 0 || p.Experts == 1 || p.Experts > 256:
		return fmt.Errorf("n_expert %d: want 0 (dense) or 2..256", p.Experts)
	case p.Experts == 0 && p.ExpertsUsed != 0 || p.Experts > 0 && (p.ExpertsUsed < 1 || p.ExpertsUsed > p.Experts):
		return fmt.Errorf("n_expert_used %d: want 1..n_expert (%d) for an MoE model, 0 for a dense one", p.ExpertsUsed, p.Experts)
	case p.Vocab < synthMinVocab || p.Vocab > 1<<20:
		return fmt.Errorf("vocab %d: want %d..%d (specials, byte tokens and printable pieces)", p.Vocab, synthMinVocab, 1<<20)
	}
	t, err := gguf.ParseType(p.Type)
	if err != nil || (t != gguf.TypeF32 && t != gguf.TypeF16 && t != gguf.TypeBF16 && t != gguf.TypeQ8_0) {
		return fmt.Errorf("type %q: want F32, F16, BF16 or Q8_0", p.Type)
	}
	if t == gguf.TypeQ8_0 && (p.Embd%32 != 0 || p.FF%32 != 0) {
		return fmt.Errorf("type Q8_0 needs n_embd (%d) and n_ff (%d) to be multiples of 32", p.Embd, p.FF)
	}
	return nil
}

func (p SynthParams) validateQwen35() error {
	switch {
	case p.Layers < 1 || p.Embd < 1 || p.FF < 1 || p.Heads < 1 || p.HeadsKV < 1 || p.Ctx < 1:
		return fmt.Errorf("qwen35: layers, n_embd, n_ff, n_head, n_head_kv, ctx: want positive, got %+v", p)
	case p.Heads%p.HeadsKV != 0:
		return fmt.Errorf("qwen35: n_head %d must divide by n_head_kv %d", p.Heads, p.HeadsKV)
	case p.HeadDim < 8 || p.HeadDim%8 != 0:
		return fmt.Errorf("qwen35: head_dim %d: want a positive multiple of 8 (rope on a quarter of it, in pairs)", p.HeadDim)
	case p.FullAttnInterval < 1:
		return fmt.Errorf("qwen35: full_attention_interval %d: want >= 1", p.FullAttnInterval)
	case p.SSMConv < 1 || p.SSMHeadDim < 1 || p.SSMKHeads < 1 || p.SSMVHeads < 1 || p.SSMVHeads%p.SSMKHeads != 0:
		return fmt.Errorf("qwen35: ssm_conv_kernel %d, ssm_state_size %d, ssm_group_count %d, ssm_time_step_rank %d: want positive, the value heads a multiple of the key heads",
			p.SSMConv, p.SSMHeadDim, p.SSMKHeads, p.SSMVHeads)
	case p.Experts != 0 || p.ExpertsUsed != 0:
		return fmt.Errorf("qwen35: n_expert %d: qwen35 blocks have dense FFNs", p.Experts)
	case p.Vocab < synthMinVocab || p.Vocab > 1<<20:
		return fmt.Errorf("vocab %d: want %d..%d (specials, byte tokens and printable pieces)", p.Vocab, synthMinVocab, 1<<20)
	}
	t, err := gguf.ParseType(p.Type)
	if err != nil || (t != gguf.TypeF32 && t != gguf.TypeF16 && t != gguf.TypeBF16 && t != gguf.TypeQ8_0) {
		return fmt.Errorf("type %q: want F32, F16, BF16 or Q8_0", p.Type)
	}
	if t == gguf.TypeQ8_0 {
		for _, k := range []struct {
			name string
			v    int
		}{{"n_embd", p.Embd}, {"n_ff", p.FF}, {"n_head·head_dim", p.Heads * p.HeadDim}, {"ssm_time_step_rank·ssm_state_size", p.SSMVHeads * p.SSMHeadDim}} {
			if k.v%32 != 0 {
				return fmt.Errorf("type Q8_0 needs every matrix's input width to be a multiple of 32: %s is %d", k.name, k.v)
			}
		}
	}
	return nil
}

// Tensors returns the tensor infos (name, type, shape) of the model synth writes, in file order.
// The planner uses it to plan a synthetic source without generating it.
func (p SynthParams) Tensors() []gguf.TensorInfo {
	if l, ok := p.lfm2moe(); ok {
		return l.lfm2moeTensors()
	}
	if q, ok := p.qwen35(); ok {
		return q.qwen35Tensors()
	}
	wt, _ := gguf.ParseType(p.Type)
	e, hd := int64(p.Embd), int64(p.Embd/p.Heads)
	q, kv, f, v := hd*int64(p.Heads), hd*int64(p.HeadsKV), int64(p.FF), int64(p.Vocab)
	ts := []gguf.TensorInfo{
		{Name: "token_embd.weight", Type: wt, Shape: []int64{e, v}},
		{Name: "output_norm.weight", Type: gguf.TypeF32, Shape: []int64{e}},
		{Name: "output.weight", Type: wt, Shape: []int64{e, v}},
	}
	for l := 0; l < p.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			gguf.TensorInfo{Name: b + "attn_norm.weight", Type: gguf.TypeF32, Shape: []int64{e}},
			gguf.TensorInfo{Name: b + "attn_q.weight", Type: wt, Shape: []int64{e, q}},
			gguf.TensorInfo{Name: b + "attn_k.weight", Type: wt, Shape: []int64{e, kv}},
			gguf.TensorInfo{Name: b + "attn_v.weight", Type: wt, Shape: []int64{e, kv}},
			gguf.TensorInfo{Name: b + "attn_output.weight", Type: wt, Shape: []int64{q, e}},
			gguf.TensorInfo{Name: b + "ffn_norm.weight", Type: gguf.TypeF32, Shape: []int64{e}},
		)
		if x := int64(p.Experts); x > 0 {
			ts = append(ts,
				gguf.TensorInfo{Name: b + "ffn_gate_inp.weight", Type: gguf.TypeF32, Shape: []int64{e, x}},
				gguf.TensorInfo{Name: b + "ffn_gate_exps.weight", Type: wt, Shape: []int64{e, f, x}},
				gguf.TensorInfo{Name: b + "ffn_up_exps.weight", Type: wt, Shape: []int64{e, f, x}},
				gguf.TensorInfo{Name: b + "ffn_down_exps.weight", Type: wt, Shape: []int64{f, e, x}},
			)
			continue
		}
		ts = append(ts,
			gguf.TensorInfo{Name: b + "ffn_gate.weight", Type: wt, Shape: []int64{e, f}},
			gguf.TensorInfo{Name: b + "ffn_up.weight", Type: wt, Shape: []int64{e, f}},
			gguf.TensorInfo{Name: b + "ffn_down.weight", Type: wt, Shape: []int64{f, e}},
		)
	}
	return ts
}

// qwen35Tensors is Tensors of a qwen35 model, in make_tiny.py's order.
func (p SynthParams) qwen35Tensors() []gguf.TensorInfo {
	wt, _ := gguf.ParseType(p.Type)
	f32 := gguf.TypeF32
	e, f, v := int64(p.Embd), int64(p.FF), int64(p.Vocab)
	hd, h, hkv := int64(p.HeadDim), int64(p.Heads), int64(p.HeadsKV)
	dk, nk, nv := int64(p.SSMHeadDim), int64(p.SSMKHeads), int64(p.SSMVHeads)
	key, val := dk*nk, dk*nv
	conv := 2*key + val
	ts := []gguf.TensorInfo{{Name: "token_embd.weight", Type: wt, Shape: []int64{e, v}}}
	for l := 0; l < p.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts, gguf.TensorInfo{Name: b + "attn_norm.weight", Type: f32, Shape: []int64{e}})
		if p.attention(l) {
			ts = append(ts,
				gguf.TensorInfo{Name: b + "attn_q.weight", Type: wt, Shape: []int64{e, 2 * h * hd}},
				gguf.TensorInfo{Name: b + "attn_k.weight", Type: wt, Shape: []int64{e, hkv * hd}},
				gguf.TensorInfo{Name: b + "attn_v.weight", Type: wt, Shape: []int64{e, hkv * hd}},
				gguf.TensorInfo{Name: b + "attn_q_norm.weight", Type: f32, Shape: []int64{hd}},
				gguf.TensorInfo{Name: b + "attn_k_norm.weight", Type: f32, Shape: []int64{hd}},
				gguf.TensorInfo{Name: b + "attn_output.weight", Type: wt, Shape: []int64{h * hd, e}})
		} else {
			ts = append(ts,
				gguf.TensorInfo{Name: b + "attn_qkv.weight", Type: wt, Shape: []int64{e, conv}},
				gguf.TensorInfo{Name: b + "attn_gate.weight", Type: wt, Shape: []int64{e, val}},
				gguf.TensorInfo{Name: b + "ssm_conv1d.weight", Type: f32, Shape: []int64{int64(p.SSMConv), conv}},
				gguf.TensorInfo{Name: b + "ssm_dt.bias", Type: f32, Shape: []int64{nv}},
				gguf.TensorInfo{Name: b + "ssm_a", Type: f32, Shape: []int64{nv}},
				gguf.TensorInfo{Name: b + "ssm_beta.weight", Type: wt, Shape: []int64{e, nv}},
				gguf.TensorInfo{Name: b + "ssm_alpha.weight", Type: wt, Shape: []int64{e, nv}},
				gguf.TensorInfo{Name: b + "ssm_norm.weight", Type: f32, Shape: []int64{dk}},
				gguf.TensorInfo{Name: b + "ssm_out.weight", Type: wt, Shape: []int64{val, e}})
		}
		ts = append(ts,
			gguf.TensorInfo{Name: b + "post_attention_norm.weight", Type: f32, Shape: []int64{e}},
			gguf.TensorInfo{Name: b + "ffn_gate.weight", Type: wt, Shape: []int64{e, f}},
			gguf.TensorInfo{Name: b + "ffn_up.weight", Type: wt, Shape: []int64{e, f}},
			gguf.TensorInfo{Name: b + "ffn_down.weight", Type: wt, Shape: []int64{f, e}})
	}
	return append(ts,
		gguf.TensorInfo{Name: "output_norm.weight", Type: f32, Shape: []int64{e}},
		gguf.TensorInfo{Name: "output.weight", Type: wt, Shape: []int64{e, v}})
}

func init() {
	Register(Define("synth", 1, func(p SynthParams) (Spec, error) {
		if err := p.Validate(); err != nil {
			return Spec{}, err
		}
		// one row of the widest tensor in float32 and encoded, the vocabulary, buffers
		row := int64(max(p.Embd, p.FF)) * 8
		return Spec{Outputs: []string{"model.gguf"}, PeakMemory: 64<<20 + row + int64(p.Vocab)*64}, nil
	}, runSynth))
}

// resolved returns p with its architecture's defaults filled in (what synthTensor reads) and the
// metadata synth writes for it.
func (p SynthParams) resolved() (SynthParams, []gguf.KV) {
	kv := synthKV(p)
	if q, ok := p.qwen35(); ok {
		p, kv = q, synthKVQwen35(q)
	}
	if l, ok := p.lfm2moe(); ok {
		p, kv = l, synthKVLFM2MoE(l)
	}
	return p, kv
}

// Header is the GGUF header synth writes for p, its metadata and tensor infos (gguf.Plan places
// them): what a planner sizes the synthetic model and its stub from before the model exists.
func (p SynthParams) Header() gguf.Header {
	p, kv := p.resolved()
	return gguf.Header{KV: kv, Tensors: p.Tensors()}
}

func runSynth(ctx context.Context, p SynthParams, req Request) error {
	p, kv := p.resolved()
	hdr := gguf.Header{KV: kv, Tensors: p.Tensors()} // Header's, the metadata built once
	f, err := os.OpenFile(req.Output("model.gguf"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	_, err = gguf.Write(ctx, bw, hdr, func(ctx context.Context, _ int, t gguf.TensorInfo, w io.Writer) error {
		return synthTensor(ctx, p, t, w)
	})
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("synth: writing %s: %w", f.Name(), err)
	}
	return nil
}

// ModelName is the general.name the generated model's header carries.
func (p SynthParams) ModelName() string {
	switch p.Arch {
	case "qwen35":
		return fmt.Sprintf("orkpipe-synth-qwen35-%dx%d-seed%d", p.Layers, p.Embd, p.Seed)
	case "lfm2moe":
		return fmt.Sprintf("orkpipe-synth-lfm2moe-%dx%d-moe%dx%d-seed%d", p.Layers, p.Embd, p.Experts, p.ExpertsUsed, p.Seed)
	}
	return fmt.Sprintf("orkpipe-synth-%dx%d-seed%d", p.Layers, p.Embd, p.Seed)
}

// synthTokenizerKV is the tokenizer of every synth model: synthVocab's n tokens as a SentencePiece
// ("llama") vocabulary with <unk>, <s> and </s> as ids 0, 1 and 2.
func synthTokenizerKV(n int) []gguf.KV {
	tokens, scores, types := synthVocab(n)
	return []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.String("llama")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		{Key: "tokenizer.ggml.scores", Value: gguf.Float32s(scores)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: gguf.Uint32(0)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32(2)},
	}
}

func synthKV(p SynthParams) []gguf.KV {
	hd := uint32(p.Embd / p.Heads)
	kv := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String("llama")},
		{Key: "general.name", Value: gguf.String(p.ModelName())},
		{Key: "llama.context_length", Value: gguf.Uint32(uint32(p.Ctx))},
		{Key: "llama.embedding_length", Value: gguf.Uint32(uint32(p.Embd))},
		{Key: "llama.feed_forward_length", Value: gguf.Uint32(uint32(p.FF))},
		{Key: "llama.block_count", Value: gguf.Uint32(uint32(p.Layers))},
		{Key: "llama.attention.head_count", Value: gguf.Uint32(uint32(p.Heads))},
		{Key: "llama.attention.head_count_kv", Value: gguf.Uint32(uint32(p.HeadsKV))},
		{Key: "llama.rope.dimension_count", Value: gguf.Uint32(hd)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: gguf.Float32(1e-5)},
	}
	if p.Experts > 0 {
		kv = append(kv, gguf.KV{Key: "llama.expert_count", Value: gguf.Uint32(uint32(p.Experts))},
			gguf.KV{Key: "llama.expert_used_count", Value: gguf.Uint32(uint32(p.ExpertsUsed))})
		kv[1].Value = gguf.String(fmt.Sprintf("orkpipe-synth-%dx%d-moe%dx%d-seed%d", p.Layers, p.Embd, p.Experts, p.ExpertsUsed, p.Seed))
	}
	return append(kv, synthTokenizerKV(p.Vocab)...)
}

// synthKVQwen35 is synthKV of a qwen35 model: llama.cpp's qwen35 keys (REFERENCE.md of the hybrid
// fixtures) and the same tokenizer.
func synthKVQwen35(p SynthParams) []gguf.KV {
	a := func(k string) string { return "qwen35." + k }
	return append(append(hybridHeadKV("qwen35", p), []gguf.KV{
		{Key: a("attention.head_count"), Value: gguf.Uint32(uint32(p.Heads))},
		{Key: a("attention.head_count_kv"), Value: gguf.Uint32(uint32(p.HeadsKV))},
		{Key: a("attention.key_length"), Value: gguf.Uint32(uint32(p.HeadDim))},
		{Key: a("attention.value_length"), Value: gguf.Uint32(uint32(p.HeadDim))},
		{Key: a("attention.layer_norm_rms_epsilon"), Value: gguf.Float32(1e-6)},
		{Key: a("rope.dimension_count"), Value: gguf.Uint32(uint32(p.ropeDim()))},
		{Key: a("rope.dimension_sections"), Value: gguf.Int32s(p.ropeSections())},
		{Key: a("rope.freq_base"), Value: gguf.Float32(1e7)},
		{Key: a("ssm.conv_kernel"), Value: gguf.Uint32(uint32(p.SSMConv))},
		{Key: a("ssm.state_size"), Value: gguf.Uint32(uint32(p.SSMHeadDim))},
		{Key: a("ssm.group_count"), Value: gguf.Uint32(uint32(p.SSMKHeads))},
		{Key: a("ssm.time_step_rank"), Value: gguf.Uint32(uint32(p.SSMVHeads))},
		{Key: a("ssm.inner_size"), Value: gguf.Uint32(uint32(p.SSMVHeads * p.SSMHeadDim))},
		{Key: a("full_attention_interval"), Value: gguf.Uint32(uint32(p.FullAttnInterval))},
	}...), synthTokenizerKV(p.Vocab)...)
}

// hybridHeadKV is the head of a hybrid architecture's synthetic KV list (qwen35, lfm2moe: the
// architecture, the name and the <arch>.* widths in llama.cpp's order), which its own keys follow.
func hybridHeadKV(arch string, p SynthParams) []gguf.KV {
	a := func(k string) string { return arch + "." + k }
	return []gguf.KV{
		{Key: "general.architecture", Value: gguf.String(arch)},
		{Key: "general.name", Value: gguf.String(p.ModelName())},
		{Key: a("vocab_size"), Value: gguf.Uint32(uint32(p.Vocab))},
		{Key: a("context_length"), Value: gguf.Uint32(uint32(p.Ctx))},
		{Key: a("embedding_length"), Value: gguf.Uint32(uint32(p.Embd))},
		{Key: a("block_count"), Value: gguf.Uint32(uint32(p.Layers))},
		{Key: a("feed_forward_length"), Value: gguf.Uint32(uint32(p.FF))},
	}
}

// synthWords are the pieces (after the single characters) the synthetic SentencePiece vocabulary
// holds: every prefix of "▁"+word, in this order, until the vocabulary is full.
var synthWords = []string{"the", "and", "was", "to", "a", "of", "he", "she", "it", "in", "her", "his", "they",
	"that", "with", "for", "on", "said", "had", "you", "but", "one", "day", "time", "there", "little", "once",
	"upon", "boat", "sea", "water", "saw", "not", "very", "all", "what", "we", "up", "out", "when", "would",
	"could", "back", "home", "mother", "father", "friend", "play", "happy", "big", "were", "them", "then",
	"so", "is", "be", "at", "as", "from", "this", "have", "are", "an", "by", "went", "like", "looked", "see",
	"ing", "ed", "er", "ly", "es", "st", "th", "ch", "sh", "wh", "ou", "ea", "ai", "oo"}

// synthVocab builds a deterministic SentencePiece vocabulary of n tokens: <unk>, <s>, </s>, the 256
// byte tokens, "▁", the printable ASCII characters, then word prefixes; scores decrease with the id
// so that llama.cpp's greedy merge prefers earlier (shorter) pieces deterministically.
func synthVocab(n int) ([]string, []float32, []int32) {
	tokens := append(make([]string, 0, n), "<unk>", "<s>", "</s>")
	types := append(make([]int32, 0, n), 2, 3, 3)
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
	}
	seen := make(map[string]bool, n)
	for _, t := range tokens {
		seen[t] = true
	}
	add := func(s string) {
		if len(tokens) < n && !seen[s] {
			seen[s] = true
			tokens = append(tokens, s)
			types = append(types, 1)
		}
	}
	add("\u2581")
	for c := byte(0x21); c < 0x7f; c++ {
		add(string(c))
	}
	for len(tokens) < n {
		before := len(tokens)
		for _, w := range synthWords {
			for i := 1; i <= len(w); i++ {
				add("\u2581" + w[:i])
			}
			add(w)
		}
		for a := byte('a'); a <= 'z' && len(tokens) < n; a++ {
			for b := byte('a'); b <= 'z'; b++ {
				add(string([]byte{a, b}))
				add("\u2581" + string([]byte{a, b}))
			}
		}
		if len(tokens) == before {
			for i := 0; len(tokens) < n; i++ {
				add(fmt.Sprintf("[PAD%d]", i))
			}
		}
	}
	scores := make([]float32, n)
	for i := range scores {
		scores[i] = -float32(i)
	}
	return tokens, scores, types
}

// synthRNG returns the generator of one tensor: seeded by the model seed and the tensor name.
func synthRNG(seed uint64, name string) *rand.Rand {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return rand.New(rand.NewPCG(seed, h))
}

// synthVector draws one value of a one-dimensional tensor: 1 + 0.1·N(0,1) for norms (2 + 0.2·N(0,1)
// for the q/k norms of attention heads, which sharpen attention as trained models do), for
// qwen35's DeltaNet the decay rates ssm_a = -exp(U(ln 0.1, ln 2)) and the time-step bias U(-2, 0),
// and for lfm2moe's expert selection bias 0.1·N(0,1).
func synthVector(name string, rng *rand.Rand) float32 {
	switch {
	case strings.HasSuffix(name, ".exp_probs_b.bias"):
		return float32(0.1 * rng.NormFloat64())
	case strings.HasSuffix(name, ".ssm_a"):
		return -float32(math.Exp(math.Log(0.1) + rng.Float64()*math.Log(20)))
	case strings.HasSuffix(name, ".ssm_dt.bias"):
		return float32(-2 * rng.Float64())
	case strings.HasSuffix(name, "_q_norm.weight"), strings.HasSuffix(name, "_k_norm.weight"):
		return float32(2 * (1 + 0.1*rng.NormFloat64()))
	}
	return float32(1 + 0.1*rng.NormFloat64())
}

// synthTensor streams one tensor row by row. Norm vectors are 1 + 0.1·N(0,1). Matrices have
// LLM-like weights: N(0, 1/K) entries, one in 48 drawn from a 4x wider normal (heavy tails),
// 0.5% of the input channels scaled by 6 and 0.5% of the output rows scaled by 3 (outlier channels).
func synthTensor(ctx context.Context, p SynthParams, t gguf.TensorInfo, w io.Writer) error {
	rng := synthRNG(p.Seed, t.Name)
	k := t.RowLen()
	rowF := make([]float32, k)
	rowB, err := t.Type.RowBytes(k)
	if err != nil {
		return err
	}
	enc := make([]byte, rowB)
	if len(t.Shape) == 1 {
		for i := range rowF {
			rowF[i] = synthVector(t.Name, rng)
		}
		return writeRow(t.Type, rowF, enc, w)
	}
	if conv, short := strings.HasSuffix(t.Name, ".ssm_conv1d.weight"), strings.HasSuffix(t.Name, ".shortconv.conv.weight"); conv || short {
		// taps of the causal convolution: U(-0.5, 0.5) (DeltaNet), U(-1/√taps, 1/√taps) (LFM2)
		width := 1.0
		if short {
			width = 2 / math.Sqrt(float64(k))
		}
		for r := int64(0); r < t.Rows(); r++ {
			for i := range rowF {
				rowF[i] = float32((rng.Float64() - 0.5) * width)
			}
			if err := writeRow(t.Type, rowF, enc, w); err != nil {
				return err
			}
		}
		return nil
	}
	n := t.Rows()
	colScale := make([]float32, k)
	for i := range colScale {
		colScale[i] = 1
	}
	for i := int64(0); i < max(1, k/200); i++ {
		colScale[rng.Int64N(k)] = 6
	}
	outRows := map[int64]bool{}
	for i := int64(0); i < max(1, n/200); i++ {
		outRows[rng.Int64N(n)] = true
	}
	std := 1 / math.Sqrt(float64(k))
	if p.Arch == "lfm2moe" && strings.HasSuffix(t.Name, ".ffn_gate_inp.weight") {
		std *= lfm2RouterGain
	}
	skew := newRouterSkew(p, t)
	for r := int64(0); r < n; r++ {
		if r%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rs := float32(1)
		if outRows[r] {
			rs = 3
		}
		for i := range rowF {
			x := rng.NormFloat64() * std
			if rng.IntN(48) == 0 {
				x *= 4
			}
			rowF[i] = float32(x) * colScale[i] * rs
		}
		skew.apply(r, rowF)
		if err := writeRow(t.Type, rowF, enc, w); err != nil {
			return err
		}
	}
	return nil
}

func writeRow(t gguf.Type, row []float32, enc []byte, w io.Writer) error {
	if t == gguf.TypeF32 {
		for i, v := range row {
			binary.LittleEndian.PutUint32(enc[4*i:], math.Float32bits(v))
		}
	} else if err := gguf.Quantize(t, row, enc); err != nil {
		return err
	}
	_, err := w.Write(enc)
	return err
}
