package model

import (
	"strconv"
	"strings"
)

// Mixer is the token-mixing half of a block: what reads the attn_norm output and adds its result to
// the hidden states before the FFN half.
type Mixer int

// The mixers.
const (
	// MixerAttention is causal softmax attention (llama, mistral, qwen2, qwen3; LFM2's attention layers).
	MixerAttention Mixer = iota
	// MixerGatedAttention is qwen35's full attention: attn_q gives per head a query and a gate, and the
	// attention output is multiplied by sigmoid(gate) before attn_output.
	MixerGatedAttention
	// MixerDeltaNet is qwen35's Gated DeltaNet linear attention (attn_qkv, attn_gate, ssm_*).
	MixerDeltaNet
	// MixerShortConv is LFM2's short convolution (shortconv.in_proj, conv, out_proj).
	MixerShortConv
)

func (m Mixer) String() string {
	switch m {
	case MixerAttention:
		return "attention"
	case MixerGatedAttention:
		return "gated-attention"
	case MixerDeltaNet:
		return "deltanet"
	case MixerShortConv:
		return "shortconv"
	}
	return "Mixer(" + strconv.Itoa(int(m)) + ")"
}

// FFNKind is the feed-forward half of a block.
type FFNKind int

// The FFN kinds.
const (
	FFNDense FFNKind = iota // SwiGLU: ffn_down(silu(ffn_gate·x) ⊙ ffn_up·x)
	FFNMoE                  // routed experts (ffn_gate_inp, ffn_{gate,up,down}_exps)
)

func (f FFNKind) String() string {
	switch f {
	case FFNDense:
		return "dense"
	case FFNMoE:
		return "moe"
	}
	return "FFNKind(" + strconv.Itoa(int(f)) + ")"
}

// LayerKind is what a block is made of.
type LayerKind struct {
	Mixer Mixer
	FFN   FFNKind
}

// Kind returns the kind of block layer (0 <= layer < NLayer): Kinds[layer] for the hybrid
// architectures; for the llama family every block is attention with a dense FFN, or with an MoE FFN
// when the model has experts.
func (c *Config) Kind(layer int) LayerKind {
	if c.Kinds != nil {
		return c.Kinds[layer]
	}
	k := LayerKind{Mixer: MixerAttention, FFN: FFNDense}
	if c.MoE() {
		k.FFN = FFNMoE
	}
	return k
}

// Matmul is one matrix weight of a block: Name is its name within the block (the tensor is
// "blk.<layer>.<Name>.weight"; for an expert site, expert e of it is the Linear and pack entry
// "blk.<layer>.<Name>.weight#<e>") and N its number of rows (outputs). Its K is the Width of its site.
type Matmul struct {
	Name string
	N    int
}

// Site is one distinct linear input of a block: the activations that one or more matmul weights read
// (weights reading the same activations share a site, and so a calibration Hessian). Its Name is stable
// (it names Hessian files and keys): the name of the first weight reading it, or of the pair/group it
// feeds ("attn_qkv", "ffn_gate_up"). Width is the number of values per token (the weights' K).
//
// An expert site (Experts > 0) is read by the Experts slices of expert tensors: the Observer sees it
// per expert through [ExpertObserver.ObserveExpert], with only the rows routed to that expert.
type Site struct {
	Name    string
	Width   int
	Weights []Matmul
	Experts int
}

// Tensor returns the GGUF name of weight w of the site in block layer ("blk.3.attn_q.weight").
func (Site) Tensor(layer int, w Matmul) string {
	return "blk." + strconv.Itoa(layer) + "." + w.Name + ".weight"
}

// The positions of a block's sites in [Config.Sites] that every layer kind shares. The first four are
// the mixer's input (the attn_norm output), the input of the mixer's output projection, the FFN's input
// (the ffn_norm output; in an MoE block the per-expert gate/up site) and the FFN's inner input (the down
// projection's; per expert in an MoE block). An MoE block adds InputRouter, the ffn_norm output of every
// token as the router (and a shared expert's gate and up) read it, and with a shared expert
// InputSharedDown, the shared expert's down input. An [Input] indexes the slice Sites returns for its
// layer.
const (
	InputQKV    Input = iota // mixer input: attn_norm output (attention: attn_q, attn_k, attn_v)
	InputAttnO               // mixer output projection input (attention: attn_output)
	InputGateUp              // ffn_norm output, read by ffn_gate, ffn_up (MoE: per expert, ffn_{gate,up}_exps)
	InputDown                // silu(gate)·up, read by ffn_down (MoE: per expert, ffn_down_exps)
	// NumInputs is the number of sites of a block with a dense FFN.
	NumInputs
	// InputRouter is the router's input in an MoE block: the ffn_norm output of every token.
	InputRouter = NumInputs
	// InputSharedDown is the shared expert's down input in an MoE block with a shared expert.
	InputSharedDown = NumInputs + 1
)

// Sites describes the linear inputs of block layer, in the order the Observer indexes them (an [Input]
// is a position in this slice; see InputQKV for the positions every kind shares):
//
//	attention        attn_qkv [attn_q, attn_k, attn_v], attn_output [attn_output]
//	gated attention  attn_qkv [attn_q (2·QDim rows: per head q then gate), attn_k, attn_v], attn_output
//	DeltaNet         attn_qkv [attn_qkv, attn_gate, ssm_alpha, ssm_beta], ssm_out [ssm_out]
//	short conv       shortconv.in_proj [shortconv.in_proj], shortconv.out_proj [shortconv.out_proj]
//	dense FFN        ffn_gate_up [ffn_gate, ffn_up], ffn_down [ffn_down]
//	MoE FFN          ffn_gate_up_exps* [ffn_gate_exps, ffn_up_exps], ffn_down_exps* [ffn_down_exps],
//	                 ffn_gate_inp [ffn_gate_inp (+ ffn_gate_shexp, ffn_up_shexp)] (+ ffn_down_shexp [ffn_down_shexp])
//
// (* per expert). qwen35moe's ffn_gate_inp_shexp, a vector, is not a site weight.
func (c *Config) Sites(layer int) []Site {
	k := c.Kind(layer)
	e := c.NEmbd
	var s []Site
	switch k.Mixer {
	case MixerAttention:
		s = append(s,
			Site{Name: "attn_qkv", Width: e, Weights: []Matmul{{"attn_q", c.QDim()}, {"attn_k", c.KVDim()}, {"attn_v", c.KVDim()}}},
			Site{Name: "attn_output", Width: c.QDim(), Weights: []Matmul{{"attn_output", e}}})
	case MixerGatedAttention:
		s = append(s,
			Site{Name: "attn_qkv", Width: e, Weights: []Matmul{{"attn_q", 2 * c.QDim()}, {"attn_k", c.KVDim()}, {"attn_v", c.KVDim()}}},
			Site{Name: "attn_output", Width: c.QDim(), Weights: []Matmul{{"attn_output", e}}})
	case MixerDeltaNet:
		v := c.SSM.ValueDim()
		s = append(s,
			Site{Name: "attn_qkv", Width: e, Weights: []Matmul{{"attn_qkv", c.SSM.ConvDim()}, {"attn_gate", v}, {"ssm_alpha", c.SSM.VHeads}, {"ssm_beta", c.SSM.VHeads}}},
			Site{Name: "ssm_out", Width: v, Weights: []Matmul{{"ssm_out", e}}})
	case MixerShortConv:
		s = append(s,
			Site{Name: "shortconv.in_proj", Width: e, Weights: []Matmul{{"shortconv.in_proj", 3 * e}}},
			Site{Name: "shortconv.out_proj", Width: e, Weights: []Matmul{{"shortconv.out_proj", e}}})
	}
	switch k.FFN {
	case FFNDense:
		s = append(s,
			Site{Name: "ffn_gate_up", Width: e, Weights: []Matmul{{"ffn_gate", c.NFF}, {"ffn_up", c.NFF}}},
			Site{Name: "ffn_down", Width: c.NFF, Weights: []Matmul{{"ffn_down", e}}})
	case FFNMoE:
		f := c.ExpertFF()
		router := Site{Name: "ffn_gate_inp", Width: e, Weights: []Matmul{{"ffn_gate_inp", c.NExpert}}}
		if c.NFFShared > 0 {
			router.Weights = append(router.Weights, Matmul{"ffn_gate_shexp", c.NFFShared}, Matmul{"ffn_up_shexp", c.NFFShared})
		}
		s = append(s,
			Site{Name: "ffn_gate_up_exps", Width: e, Weights: []Matmul{{"ffn_gate_exps", f}, {"ffn_up_exps", f}}, Experts: c.NExpert},
			Site{Name: "ffn_down_exps", Width: f, Weights: []Matmul{{"ffn_down_exps", e}}, Experts: c.NExpert},
			router)
		if c.NFFShared > 0 {
			s = append(s, Site{Name: "ffn_down_shexp", Width: c.NFFShared, Weights: []Matmul{{"ffn_down_shexp", e}}})
		}
	}
	return s
}

// SiteOf maps a block weight tensor name ("blk.<l>.<weight>.weight", or an expert slice of one,
// "blk.<l>.<weight>.weight#<e>") to its layer, the site that weight reads and the matmul within it;
// ok is false for a tensor outside the blocks, one no site lists, an expert slice of a weight that is
// not per expert (or a whole expert tensor), or an expert index out of range.
func (c *Config) SiteOf(tensor string) (layer int, in Input, w Matmul, ok bool) {
	base, e, isExpert, err := splitExpert(tensor)
	if err != nil {
		return 0, 0, Matmul{}, false
	}
	rest, found := strings.CutPrefix(base, "blk.")
	if !found {
		return 0, 0, Matmul{}, false
	}
	idx, suffix, found := strings.Cut(rest, ".")
	l, err := strconv.Atoi(idx)
	if !found || err != nil || l < 0 || l >= c.NLayer || strconv.Itoa(l) != idx {
		return 0, 0, Matmul{}, false
	}
	name, found := strings.CutSuffix(suffix, ".weight")
	if !found {
		return 0, 0, Matmul{}, false
	}
	for i, s := range c.Sites(l) {
		for _, m := range s.Weights {
			if m.Name != name {
				continue
			}
			if isExpert != (s.Experts > 0) || (isExpert && e >= s.Experts) {
				return 0, 0, Matmul{}, false
			}
			return l, Input(i), m, true
		}
	}
	return 0, 0, Matmul{}, false
}
