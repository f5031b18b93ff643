package model

import "fmt"

// The llama family (llama.cpp src/models/llama.cpp, qwen2.cpp, qwen3.cpp): every block is
//
//	h += attn_output(attention(rope(q_norm(attn_q·x)), rope(k_norm(attn_k·x)), attn_v·x)),  x = rms(h)·attn_norm
//	h += ffn_down(silu(ffn_gate·x) ⊙ ffn_up·x),                                              x = rms(h)·ffn_norm
//
// with q/k norms only in qwen3, biases on q/k/v in qwen2, normal RoPE for llama/mistral (the converter
// permutes Q/K) and neox for qwen2/qwen3. With expert_count > 0 the FFN is llama.cpp's MoE for arch
// llama: softmax gating, top-k, renormalized ([Route]).
func init() {
	for _, a := range []struct {
		name string
		neox bool
	}{{"llama", false}, {"mistral", false}, {"qwen2", true}, {"qwen3", true}} {
		neox := a.neox
		archSpecs[a.name] = &archSpec{
			config: func(r *keyReader, c *Config) error {
				c.RopeNeox = neox
				r.uint("feed_forward_length", &c.NFF, 0, true)
				attentionKeys(r, c)
				r.float("attention.layer_norm_rms_epsilon", &c.NormEps, 0, true)
				return nil
			},
			validate:   validateLlama,
			ffnNorm:    "ffn_norm",
			outputNorm: "output_norm",
		}
	}
}

func validateLlama(c *Config) error {
	if c.Kinds != nil {
		return fmt.Errorf("%s: per-block kinds given: %w (every block of the llama family is attention + FFN)", c.Arch, ErrBadModel)
	}
	if c.NExpert > 0 && c.RopeNeox {
		return fmt.Errorf("%s: expert_count %d: %w (mixture-of-experts blocks are implemented for arch llama/mistral only)", c.Arch, c.NExpert, ErrUnsupported)
	}
	return nil
}
