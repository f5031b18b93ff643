package model

import (
	"fmt"

	"orkpipe/ork/gguf"
)

// Config is the shape of a network, as read from GGUF metadata (<arch>.*). The llama family (llama,
// mistral, qwen2, qwen3) has one kind of block throughout; the hybrid architectures (qwen35, qwen35moe,
// lfm2, lfm2moe) set Kinds, and the fields of the blocks they use (SSM, ShortConvL, MoE routing).
type Config struct {
	Arch    string // general.architecture
	NEmbd   int    // embedding_length
	NFF     int    // feed_forward_length (of dense FFN blocks)
	NLayer  int    // block_count, less nextn_predict_layers (multi-token-prediction blocks are not run)
	NHead   int    // attention.head_count
	NHeadKV int    // attention.head_count_kv (of the attention blocks, for an array per layer)
	HeadDim int    // attention.key_length (default NEmbd / NHead)
	NVocab  int    // rows of token_embd
	// NextN is nextn_predict_layers (qwen35, qwen35moe): the multi-token-prediction blocks after the
	// trunk, blk.NLayer to blk.NLayer+NextN-1, which llama.cpp runs only to draft tokens for
	// speculative decoding. Nothing here runs them.
	NextN int
	// RopeDim is rope.dimension_count (default HeadDim): the leading dimensions of each head RoPE rotates.
	RopeDim int
	// RopeBase is rope.freq_base (default 10000).
	RopeBase float32
	// RopeFreqScale is 1 / rope.scaling.factor for linear scaling (default 1).
	RopeFreqScale float32
	// RopeNeox selects the neox RoPE (pairs (i, i+RopeDim/2)) instead of the normal interleaved pairs
	// (2i, 2i+1). llama.cpp uses normal for llama/mistral (the converter permutes Q/K) and neox for the
	// others.
	RopeNeox bool
	// RopeSections, when not nil, are rope.dimension_sections (4 values): qwen35's interleaved
	// multi-section RoPE (llama.cpp's IMROPE, neox pairs). Pair i takes the position of section
	// t, h, w or e chosen by i mod sum(sections); for text the first three are the token's position and
	// e is 0, so a pair assigned to e is not rotated.
	RopeSections []int
	// RopeFreqFactors, when not nil, holds RopeDim/2 divisors of the rotation frequencies (the tensor
	// rope_freqs.weight of Llama 3.1-style long-context models), as ggml applies them.
	RopeFreqFactors []float32
	// NormEps is attention.layer_norm_rms_epsilon.
	NormEps float32
	// NExpert is expert_count (0: no mixture-of-experts block). For the llama family every block is then
	// an MoE block: a router ffn_gate_inp [n_embd, n_expert] and expert tensors ffn_gate_exps/ffn_up_exps
	// [n_embd, n_ff_exp, n_expert], ffn_down_exps [n_ff_exp, n_embd, n_expert] replace ffn_gate/ffn_up/
	// ffn_down; NFF is then the width of one expert.
	NExpert int
	// NExpertUsed is expert_used_count: the experts each token is routed to (top-k).
	NExpertUsed int
	// NFFExp is expert_feed_forward_length, the width of one routed expert (0: NFF).
	NFFExp int
	// NFFShared is the width of the shared expert of qwen35moe MoE blocks (0: no shared expert).
	NFFShared int
	// Gating is how the router's logits become expert probabilities (expert_gating_func; 0 is
	// softmax, what the llama family's MoE blocks use).
	Gating Gating
	// ExpertBias: MoE blocks have exp_probs_b.bias, added to the probabilities to select the experts
	// (the weights stay the unbiased probabilities).
	ExpertBias bool
	// Kinds, when not nil, holds the kind of every block (hybrid architectures); nil: every block is
	// attention with a dense FFN, or with an MoE FFN when NExpert > 0.
	Kinds []LayerKind
	// SSM is the shape of the Gated DeltaNet blocks (qwen35 ssm.*).
	SSM SSMShape
	// ShortConvL is shortconv.l_cache, the taps of the causal convolution of LFM2's conv blocks.
	ShortConvL int
	// WeightType is the widest (most bytes per value) encoding of the block matmul weights as a
	// GGUFSource with KeepEncoded holds them, the MoE router excepted: a type KeepsEncoded reports, or
	// gguf.TypeF32 (the zero value) when any of them is held as float32. ConfigFromGGUF sets it; memory
	// estimates ([Config.WeightBytes]) use it.
	WeightType gguf.Type
}

// SSMShape is the shape of a Gated DeltaNet block (llama.cpp's ssm.* keys of qwen35).
type SSMShape struct {
	ConvKernel int // ssm.conv_kernel: taps of the causal convolution over q, k, v
	HeadDim    int // ssm.state_size: the size of a key head and of a value head
	KHeads     int // ssm.group_count: query/key heads
	VHeads     int // ssm.time_step_rank: value heads (a multiple of KHeads)
}

// KeyDim is the width of q and of k (KHeads·HeadDim), ValueDim that of v, z and the output
// (VHeads·HeadDim, ssm.inner_size), ConvDim that of the fused q|k|v projection the convolution runs over.
func (s SSMShape) KeyDim() int   { return s.KHeads * s.HeadDim }
func (s SSMShape) ValueDim() int { return s.VHeads * s.HeadDim }
func (s SSMShape) ConvDim() int  { return 2*s.KeyDim() + s.ValueDim() }

// Gating is an MoE router's gating function (llama.cpp's llama_expert_gating_func_type).
type Gating int

// The gating functions implemented.
const (
	GatingSoftmax Gating = 1 // probabilities = softmax(logits)
	GatingSigmoid Gating = 2 // probabilities = sigmoid(logits), each on its own
)

func (g Gating) String() string {
	switch g {
	case GatingSoftmax:
		return "softmax"
	case GatingSigmoid:
		return "sigmoid"
	}
	return fmt.Sprintf("Gating(%d)", int(g))
}

// WeightBytes is an upper bound of the memory a GGUFSource with KeepEncoded holds for one n×k block
// matmul weight of the model: n rows of k values in WeightType (whole blocks), or 4·n·k as float32.
func (c *Config) WeightBytes(n, k int) int64 {
	if !KeepsEncoded(c.WeightType) {
		return 4 * int64(n) * int64(k)
	}
	bs := c.WeightType.BlockSize()
	return int64(n) * int64(ceilDiv(k, bs)) * int64(c.WeightType.BlockBytes())
}

// BlockScratchBytes is the most scratch one Apply of a block matmul weight needs on top of WeightBytes:
// the largest EncodedScratchBytes of the blocks' site weights (the MoE router excepted) when WeightType
// is held encoded, else 0 (a float32 Dense needs none). Applies run one at a time in a forward pass, so
// a window needs it once.
func (c *Config) BlockScratchBytes() int64 {
	if !KeepsEncoded(c.WeightType) {
		return 0
	}
	var most int64
	for _, l := range c.kindLayers() {
		for _, s := range c.Sites(l) {
			for _, w := range s.Weights {
				if w.Name != "ffn_gate_inp" {
					most = max(most, EncodedScratchBytes(w.N, s.Width))
				}
			}
		}
	}
	return most
}

// kindLayers returns one layer of each distinct kind, in layer order.
func (c *Config) kindLayers() []int {
	var out []int
	seen := map[LayerKind]bool{}
	for l := 0; l < c.NLayer; l++ {
		if k := c.Kind(l); !seen[k] {
			seen[k] = true
			out = append(out, l)
		}
	}
	return out
}

// MoE reports whether any block is a mixture-of-experts block.
func (c *Config) MoE() bool { return c.NExpert > 0 }

// ExpertFF is the width of one routed expert: NFFExp, or NFF when it is 0.
func (c *Config) ExpertFF() int {
	if c.NFFExp > 0 {
		return c.NFFExp
	}
	return c.NFF
}

// QDim is the width of the query projection (NHead·HeadDim); KVDim that of the key and value projections.
func (c *Config) QDim() int  { return c.NHead * c.HeadDim }
func (c *Config) KVDim() int { return c.NHeadKV * c.HeadDim }

// Validate checks that the shape is consistent and that every block kind it uses is implemented.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: %s: %w", c.Arch, fmt.Sprintf(format, a...), ErrBadModel)
	}
	spec, ok := archSpecs[c.Arch]
	if !ok {
		return fmt.Errorf("general.architecture %q: %w (the forward pass supports %s; use an imatrix file for others)", c.Arch, ErrUnsupported, supportedArchs())
	}
	if c.NEmbd <= 0 || c.NLayer <= 0 || c.NVocab <= 0 {
		return bad("non-positive dimension in %+v", *c)
	}
	if c.Kinds != nil && len(c.Kinds) != c.NLayer {
		return bad("%d block kinds for %d blocks", len(c.Kinds), c.NLayer)
	}
	var used struct{ attn, delta, conv, dense, moe bool }
	for l := 0; l < c.NLayer; l++ {
		k := c.Kind(l)
		switch k.Mixer {
		case MixerAttention, MixerGatedAttention:
			used.attn = true
		case MixerDeltaNet:
			used.delta = true
		case MixerShortConv:
			used.conv = true
		default:
			return bad("block %d: mixer %s", l, k.Mixer)
		}
		switch k.FFN {
		case FFNDense:
			used.dense = true
		case FFNMoE:
			used.moe = true
		default:
			return bad("block %d: FFN %s", l, k.FFN)
		}
	}
	if used.attn {
		switch {
		case c.NHead <= 0, c.NHeadKV <= 0, c.HeadDim <= 0:
			return bad("attention.head_count %d, head_count_kv %d, key_length %d: want positive", c.NHead, c.NHeadKV, c.HeadDim)
		case c.NHead%c.NHeadKV != 0:
			return bad("head_count %d is not a multiple of head_count_kv %d", c.NHead, c.NHeadKV)
		case c.RopeDim <= 0 || c.RopeDim > c.HeadDim || c.RopeDim%2 != 0:
			return bad("rope.dimension_count %d: want an even number in [2, %d]", c.RopeDim, c.HeadDim)
		case !(c.RopeBase > 0):
			return bad("rope.freq_base %v: want > 0", c.RopeBase)
		case !(c.RopeFreqScale > 0):
			return bad("rope frequency scale %v: want > 0", c.RopeFreqScale)
		case c.RopeFreqFactors != nil && len(c.RopeFreqFactors) != c.RopeDim/2:
			return bad("rope_freqs.weight has %d values, want rope.dimension_count/2 = %d", len(c.RopeFreqFactors), c.RopeDim/2)
		case c.RopeSections != nil && (len(c.RopeSections) != 4 || !c.RopeNeox || sectionsSum(c.RopeSections) <= 0 || sectionsSum(c.RopeSections) > c.RopeDim/2):
			return bad("rope.dimension_sections %v: want 4 values >= 0 summing to 1..rope.dimension_count/2 = %d", c.RopeSections, c.RopeDim/2)
		}
	}
	if used.dense && c.NFF <= 0 {
		return bad("feed_forward_length %d: want > 0", c.NFF)
	}
	if used.delta {
		s := c.SSM
		if s.ConvKernel <= 0 || s.HeadDim <= 0 || s.KHeads <= 0 || s.VHeads <= 0 || s.VHeads%s.KHeads != 0 {
			return bad("ssm.conv_kernel %d, ssm.state_size %d, ssm.group_count %d, ssm.time_step_rank %d: want positive, time_step_rank a multiple of group_count",
				s.ConvKernel, s.HeadDim, s.KHeads, s.VHeads)
		}
	}
	if used.conv && c.ShortConvL < 2 {
		return bad("shortconv.l_cache %d: want >= 2", c.ShortConvL)
	}
	switch {
	case !(c.NormEps > 0):
		return bad("attention.layer_norm_rms_epsilon %v: want > 0", c.NormEps)
	case c.NExpert < 0 || c.NExpertUsed < 0 || (c.NExpert == 0) != (c.NExpertUsed == 0) || c.NExpertUsed > c.NExpert:
		return bad("expert_count %d, expert_used_count %d: want both 0 (dense) or 0 < expert_used_count <= expert_count", c.NExpert, c.NExpertUsed)
	case used.moe && c.NExpert == 0:
		return bad("mixture-of-experts blocks without expert_count")
	case used.moe && c.ExpertFF() <= 0:
		return bad("expert_feed_forward_length %d: want > 0", c.ExpertFF())
	case used.moe && c.Gating != 0 && c.Gating != GatingSoftmax && c.Gating != GatingSigmoid:
		return fmt.Errorf("%s: expert_gating_func %d: %w (softmax (1) and sigmoid (2) are implemented)", c.Arch, int(c.Gating), ErrUnsupported)
	case c.NFFShared < 0:
		return bad("expert_shared_feed_forward_length %d: want >= 0", c.NFFShared)
	}
	return spec.validate(c)
}

func sectionsSum(s []int) int {
	n := 0
	for _, v := range s {
		if v < 0 {
			return -1
		}
		n += v
	}
	return n
}
