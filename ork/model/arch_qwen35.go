package model

import (
	"fmt"

	"orkpipe/ork/gguf"
)

// qwen35 and qwen35moe (llama.cpp src/models/qwen35.cpp, qwen35moe.cpp, delta-net-base.cpp): Qwen3.5/3.6
// hybrids. Block l is a Gated DeltaNet block unless (l+1) % full_attention_interval == 0 (or as
// attention.recurrent_layers says), then a gated attention block:
//
//	h += ssm_out(DeltaNet(x)) or attn_output(GatedAttention(x)),  x = rms(h)·attn_norm
//	h += FFN(x),                                                  x = rms(h)·post_attention_norm
//
// DeltaNet: [deltaNet]; gated attention: attn_q gives per head q and a gate, q/k RMS-normed per head,
// IMROPE (neox pairs over rope.dimension_count dims, rope.dimension_sections), causal attention, the
// output multiplied by sigmoid(gate) ([Model.gatedAttention]). The FFN is SwiGLU (qwen35) or, in
// qwen35moe, softmax-routed experts (top-k, renormalized) plus a shared expert gated by
// sigmoid(ffn_gate_inp_shexp·x). Multi-token-prediction blocks (nextn_predict_layers) are not run.
func init() {
	for _, name := range []string{"qwen35", "qwen35moe"} {
		moe := name == "qwen35moe"
		archSpecs[name] = &archSpec{
			config:     func(r *keyReader, c *Config) error { return qwen35Config(r, c, moe) },
			validate:   validateQwen35,
			ffnNorm:    "post_attention_norm",
			qkNorm:     true,
			outputNorm: "output_norm",
		}
	}
}

func qwen35Config(r *keyReader, c *Config, moe bool) error {
	c.RopeNeox = true
	var nextn int
	r.uint("nextn_predict_layers", &nextn, 0, false)
	if r.err == nil && nextn >= c.NLayer {
		return fmt.Errorf("%s: %snextn_predict_layers %d: want fewer than block_count %d: %w", r.f.Path, r.p, nextn, c.NLayer, ErrBadModel)
	}
	c.NLayer -= nextn
	c.NextN = nextn
	// llama.cpp's own test for an MTP-only file (llama_model_qwen35::load_arch_tensors, mtp_only).
	if nextn > 0 && r.f.TensorIndex("blk.0.attn_norm.weight") < 0 {
		blocks := fmt.Sprintf("block blk.%d", c.NLayer)
		if nextn > 1 {
			blocks = fmt.Sprintf("blocks blk.%d to blk.%d", c.NLayer, c.NLayer+nextn-1)
		}
		return fmt.Errorf("%s: %snextn_predict_layers %d and no blk.0.attn_norm.weight: the file holds only the multi-token-prediction %s (%d tensors in all), a speculative draft convert_hf_to_gguf.py --mtp writes beside the model: %w; build from the model's own file",
			r.f.Path, r.p, nextn, blocks, len(r.f.Tensors), ErrDraftModel)
	}
	r.uint("feed_forward_length", &c.NFF, 0, !moe)
	attentionKeys(r, c)
	r.float("attention.layer_norm_rms_epsilon", &c.NormEps, 0, true)
	sections := r.perLayer("rope.dimension_sections", 4, 0)
	if r.err == nil && !r.has("rope.dimension_sections") {
		r.err = fmt.Errorf("%s: key %q: missing (required for %s): %w", r.f.Path, r.p+"rope.dimension_sections", c.Arch, ErrBadModel)
	}
	c.RopeSections = sections
	var inner int
	r.uint("ssm.conv_kernel", &c.SSM.ConvKernel, 0, true)
	r.uint("ssm.inner_size", &inner, 0, true)
	r.uint("ssm.state_size", &c.SSM.HeadDim, 0, true)
	r.uint("ssm.time_step_rank", &c.SSM.VHeads, 0, true)
	r.uint("ssm.group_count", &c.SSM.KHeads, 0, true)
	if r.err == nil && inner != c.SSM.ValueDim() {
		return fmt.Errorf("%s: %sssm.inner_size %d: want ssm.state_size·ssm.time_step_rank = %d: %w", r.f.Path, r.p, inner, c.SSM.ValueDim(), ErrBadModel)
	}
	if moe {
		expertKeys(r, c, false, false)
		c.Gating = GatingSoftmax // qwen35moe.cpp passes softmax whatever expert_gating_func says
		r.uint("expert_shared_feed_forward_length", &c.NFFShared, c.NFF, false)
	}
	if r.err != nil {
		return r.err
	}
	recurrent := make([]bool, c.NLayer)
	if v, ok := r.f.Lookup(r.p + "attention.recurrent_layers"); ok {
		a, err := v.Array()
		flags, isBool := a.([]uint8)
		if err != nil || !isBool || v.ElemType() != gguf.ValueBool || len(flags) < c.NLayer {
			return fmt.Errorf("%s: key %q: want an array of at least %d bools: %w", r.f.Path, r.p+"attention.recurrent_layers", c.NLayer, ErrBadModel)
		}
		for l := range recurrent {
			recurrent[l] = flags[l] != 0
		}
	} else {
		interval := 4
		r.uint("full_attention_interval", &interval, 4, false)
		if r.err == nil && interval <= 0 {
			return fmt.Errorf("%s: %sfull_attention_interval %d: want > 0: %w", r.f.Path, r.p, interval, ErrBadModel)
		}
		for l := range recurrent {
			recurrent[l] = (l+1)%interval != 0
		}
	}
	ffn := FFNDense
	if moe {
		ffn = FFNMoE
	}
	c.Kinds = make([]LayerKind, c.NLayer)
	for l := range c.Kinds {
		c.Kinds[l] = LayerKind{Mixer: MixerGatedAttention, FFN: ffn}
		if recurrent[l] {
			c.Kinds[l].Mixer = MixerDeltaNet
		}
	}
	return r.err
}

func validateQwen35(c *Config) error {
	moe := c.Arch == "qwen35moe"
	for l, k := range c.Kinds {
		if (k.Mixer != MixerDeltaNet && k.Mixer != MixerGatedAttention) || (k.FFN == FFNMoE) != moe {
			return fmt.Errorf("%s: block %d: %s mixer with %s FFN: %w", c.Arch, l, k.Mixer, k.FFN, ErrBadModel)
		}
	}
	if moe && c.NFFShared <= 0 {
		return fmt.Errorf("%s: expert_shared_feed_forward_length %d: want > 0: %w", c.Arch, c.NFFShared, ErrBadModel)
	}
	return nil
}
