package model

import (
	"fmt"

	"orkpipe/ork/gguf"
)

// Config is the shape of a llama-family network, as read from GGUF metadata (<arch>.*).
type Config struct {
	Arch    string // general.architecture: llama, mistral, qwen2, qwen3
	NEmbd   int    // embedding_length
	NFF     int    // feed_forward_length
	NLayer  int    // block_count
	NHead   int    // attention.head_count
	NHeadKV int    // attention.head_count_kv
	HeadDim int    // attention.key_length (default NEmbd / NHead)
	NVocab  int    // rows of token_embd
	// RopeDim is rope.dimension_count (default HeadDim): the leading dimensions of each head RoPE rotates.
	RopeDim int
	// RopeBase is rope.freq_base (default 10000).
	RopeBase float32
	// RopeFreqScale is 1 / rope.scaling.factor for linear scaling (default 1).
	RopeFreqScale float32
	// RopeNeox selects the neox RoPE (pairs (i, i+RopeDim/2)) instead of the normal interleaved pairs
	// (2i, 2i+1). llama.cpp uses normal for llama/mistral (the converter permutes Q/K) and neox for qwen2/3.
	RopeNeox bool
	// RopeFreqFactors, when not nil, holds RopeDim/2 divisors of the rotation frequencies (the tensor
	// rope_freqs.weight of Llama 3.1-style long-context models), as ggml applies them.
	RopeFreqFactors []float32
	// NormEps is attention.layer_norm_rms_epsilon.
	NormEps float32
	// NExpert is expert_count (0: a dense model). When it is positive every block is a mixture-of-experts
	// block (llama.cpp's llama arch): a router ffn_gate_inp [n_embd, n_expert] and expert tensors
	// ffn_gate_exps/ffn_up_exps [n_embd, n_ff, n_expert], ffn_down_exps [n_ff, n_embd, n_expert] replace
	// ffn_gate/ffn_up/ffn_down; NFF is then the width of one expert.
	NExpert int
	// NExpertUsed is expert_used_count: the experts each token is routed to (top-k).
	NExpertUsed int
	// WeightType is the widest (most bytes per value) encoding of the block matmul weights as a
	// GGUFSource with KeepEncoded holds them, the MoE router excepted: a type KeepsEncoded reports, or
	// gguf.TypeF32 (the zero value) when any of them is held as float32. ConfigFromGGUF sets it; memory
	// estimates ([Config.WeightBytes]) use it.
	WeightType gguf.Type
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
// the largest EncodedScratchBytes of the block's weights when WeightType is held encoded, else 0 (a
// float32 Dense needs none). Applies run one at a time in a forward pass, so a window needs it once.
func (c *Config) BlockScratchBytes() int64 {
	if !KeepsEncoded(c.WeightType) {
		return 0
	}
	e, q, kv, f := c.NEmbd, c.QDim(), c.KVDim(), c.NFF
	var most int64
	for _, s := range [][2]int{{q, e}, {kv, e}, {e, q}, {f, e}, {e, f}} {
		most = max(most, EncodedScratchBytes(s[0], s[1]))
	}
	return most
}

// MoE reports whether the blocks are mixture-of-experts blocks.
func (c *Config) MoE() bool { return c.NExpert > 0 }

// ropeNeox reports llama.cpp's RoPE type for an architecture, and whether the architecture is supported.
func ropeNeox(arch string) (neox bool, ok bool) {
	switch arch {
	case "llama", "mistral":
		return false, true
	case "qwen2", "qwen3":
		return true, true
	}
	return false, false
}

// Validate checks that the shape is consistent.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: %s: %w", c.Arch, fmt.Sprintf(format, a...), ErrBadModel)
	}
	if _, ok := ropeNeox(c.Arch); !ok {
		return fmt.Errorf("general.architecture %q: %w (the forward pass supports llama, mistral, qwen2, qwen3; use an imatrix file for others)", c.Arch, ErrUnsupported)
	}
	switch {
	case c.NEmbd <= 0, c.NFF <= 0, c.NLayer <= 0, c.NHead <= 0, c.NHeadKV <= 0, c.HeadDim <= 0, c.NVocab <= 0:
		return bad("non-positive dimension in %+v", *c)
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
	case !(c.NormEps > 0):
		return bad("attention.layer_norm_rms_epsilon %v: want > 0", c.NormEps)
	case c.NExpert < 0 || c.NExpertUsed < 0 || (c.NExpert == 0) != (c.NExpertUsed == 0) || c.NExpertUsed > c.NExpert:
		return bad("expert_count %d, expert_used_count %d: want both 0 (dense) or 0 < expert_used_count <= expert_count", c.NExpert, c.NExpertUsed)
	case c.NExpert > 0 && c.RopeNeox:
		return fmt.Errorf("%s: expert_count %d: %w (mixture-of-experts blocks are implemented for arch llama/mistral only)", c.Arch, c.NExpert, ErrUnsupported)
	}
	return nil
}

// QDim is the width of the query projection (NHead·HeadDim); KVDim that of the key and value projections.
func (c *Config) QDim() int  { return c.NHead * c.HeadDim }
func (c *Config) KVDim() int { return c.NHeadKV * c.HeadDim }
