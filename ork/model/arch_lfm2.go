package model

import "fmt"

// lfm2 and lfm2moe (llama.cpp src/models/lfm2.cpp, lfm2moe.cpp): Liquid LFM2. Block l is a short
// convolution block when attention.head_count_kv[l] is 0, else an attention block:
//
//	h += shortconv.out_proj(ShortConv(x)) or attn_output(attention(x)),  x = rms(h)·attn_norm
//	h += FFN(x),                                                        x = rms(h)·ffn_norm
//
// ShortConv: [shortConv]; attention has per-head RMS-normed q and k and neox RoPE over the whole head.
// The FFN is SwiGLU in lfm2 and in lfm2moe's first leading_dense_block_count blocks; the other lfm2moe
// blocks route each token to the top-k experts by sigmoid(router·x) + exp_probs_b and weight them by the
// unbiased sigmoid probabilities, renormalized. The final norm is named token_embd_norm.
func init() {
	for _, name := range []string{"lfm2", "lfm2moe"} {
		moe := name == "lfm2moe"
		archSpecs[name] = &archSpec{
			config:     func(r *keyReader, c *Config) error { return lfm2Config(r, c, moe) },
			validate:   validateLFM2,
			ffnNorm:    "ffn_norm",
			qkNorm:     true,
			outputNorm: "token_embd_norm",
		}
	}
}

func lfm2Config(r *keyReader, c *Config, moe bool) error {
	c.RopeNeox = true
	kv := attentionKeys(r, c)
	r.float("attention.layer_norm_rms_epsilon", &c.NormEps, 0, true)
	r.uint("shortconv.l_cache", &c.ShortConvL, 0, true)
	var window int
	r.uint("attention.sliding_window", &window, 0, false)
	if r.err == nil && window > 0 {
		return fmt.Errorf("%s: %sattention.sliding_window %d: %w (sliding-window attention is not implemented)", r.f.Path, r.p, window, ErrUnsupported)
	}
	lead := c.NLayer
	if moe {
		r.uint("leading_dense_block_count", &lead, 0, false)
		expertKeys(r, c, true, true)
		c.ExpertBias = true
	}
	r.uint("feed_forward_length", &c.NFF, 0, lead > 0)
	if r.err != nil {
		return r.err
	}
	c.Kinds = make([]LayerKind, c.NLayer)
	for l := range c.Kinds {
		k := LayerKind{Mixer: MixerAttention, FFN: FFNDense}
		if kv[l] == 0 {
			k.Mixer = MixerShortConv
		}
		if l >= lead {
			k.FFN = FFNMoE
		}
		c.Kinds[l] = k
	}
	return nil
}

func validateLFM2(c *Config) error {
	moe := c.Arch == "lfm2moe"
	for l, k := range c.Kinds {
		if (k.Mixer != MixerAttention && k.Mixer != MixerShortConv) || (k.FFN == FFNMoE && !moe) {
			return fmt.Errorf("%s: block %d: %s mixer with %s FFN: %w", c.Arch, l, k.Mixer, k.FFN, ErrBadModel)
		}
	}
	return nil
}
