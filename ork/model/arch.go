package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"orkpipe/ork/gguf"
)

// archSpec is what differs between architectures beyond their block kinds: the keys they read, the
// checks they make, and the names of two norms. Each architecture file registers its own.
type archSpec struct {
	// config reads the architecture's keys into c (which holds the keys every architecture shares:
	// embedding_length, block_count and the optional attention, rope and expert keys).
	config func(r *keyReader, c *Config) error
	// validate checks what Config.Validate's generic checks do not.
	validate func(c *Config) error
	// ffnNorm is the block's norm before the FFN (within the block), outputNorm the final norm.
	ffnNorm, outputNorm string
	// qkNorm: attention blocks must have attn_q_norm and attn_k_norm (else they are optional).
	qkNorm bool
}

var archSpecs = map[string]*archSpec{}

// supportedArchs lists the architectures the forward pass implements.
func supportedArchs() string {
	var names []string
	for n := range archSpecs {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// keyReader reads <arch>.* keys of a GGUF file; the first error sticks and names the file and the key.
type keyReader struct {
	f   *gguf.File
	p   string // "<arch>."
	err error
}

func (r *keyReader) has(key string) bool {
	_, ok := r.f.Lookup(r.p + key)
	return ok
}

// uint reads an unsigned integer key into dst, or def when the key is absent and not required.
func (r *keyReader) uint(key string, dst *int, def int, required bool) {
	if r.err != nil {
		return
	}
	*dst = def
	if !required && !r.has(key) {
		return
	}
	u, err := r.f.Uint(r.p + key)
	if err == nil && u > 1<<31 {
		err = fmt.Errorf("%s: key %q: %d is too large", r.f.Path, r.p+key, u)
	}
	r.err = err
	*dst = int(u)
}

// float reads a float key into dst, or def when the key is absent and not required.
func (r *keyReader) float(key string, dst *float32, def float32, required bool) {
	if r.err != nil {
		return
	}
	*dst = def
	if !required && !r.has(key) {
		return
	}
	v, err := r.f.Float(r.p + key)
	r.err = err
	*dst = float32(v)
}

// perLayer reads a key that is a scalar or an array of n unsigned integers (llama.cpp's
// get_key_or_arr) as n values; absent, every value is def.
func (r *keyReader) perLayer(key string, n, def int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = def
	}
	if r.err != nil || !r.has(key) {
		return out
	}
	v, _ := r.f.Lookup(r.p + key)
	if !v.IsArray() {
		var x int
		r.uint(key, &x, def, true)
		for i := range out {
			out[i] = x
		}
		return out
	}
	a, err := v.IntArray()
	if err == nil && len(a) != n {
		err = fmt.Errorf("array of %d values, want one per block (%d)", len(a), n)
	}
	for i := 0; err == nil && i < n; i++ {
		if a[i] < 0 || a[i] > 1<<31 {
			err = fmt.Errorf("value %d at %d: want 0..2^31", a[i], i)
		}
		out[i] = int(a[i])
	}
	if err != nil {
		r.err = fmt.Errorf("%s: key %q: %w: %w", r.f.Path, r.p+key, err, ErrBadModel)
	}
	return out
}

// uniform returns the one non-zero value of vs (0 when all are zero), or an error naming key when two
// non-zero values differ (blocks of different widths are not implemented).
func (r *keyReader) uniform(key string, vs []int) int {
	u := 0
	for i, v := range vs {
		if v == 0 {
			continue
		}
		if u != 0 && v != u && r.err == nil {
			r.err = fmt.Errorf("%s: key %q: block %d has %d, an earlier block %d: %w (blocks of different widths are not implemented)",
				r.f.Path, r.p+key, i, v, u, ErrUnsupported)
		}
		u = v
	}
	return u
}

// ConfigFromGGUF reads the network shape from the <general.architecture>.* metadata of f. A key the
// architecture needs and the file lacks, or a value this package does not implement, is an error
// naming the file and the key; a shard of a model split across files (gguf.File.Shard) is an error
// wrapping ErrSplitModel, a Qwen3.5/3.6 multi-token-prediction draft one wrapping ErrDraftModel, and a
// block_count above the file's tensor count one wrapping ErrBadModel, before anything is sized by it
// (FuzzConfigFromGGUF). Config.CheckTensors then checks the file's tensors against the shape.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	var c Config
	no, count, err := f.Shard()
	if err != nil {
		return c, err
	}
	if count > 0 {
		return c, fmt.Errorf("%s: %s %d, %s %d: shard %d of %d of a model split across files (llama-gguf-split), which holds only some of its tensors: %w; merge the shards first: llama-gguf-split --merge FIRST-SHARD.gguf MODEL.gguf",
			f.Path, gguf.SplitNoKey, no, gguf.SplitCountKey, count, no+1, count, ErrSplitModel)
	}
	if c.Arch, err = f.String("general.architecture"); err != nil {
		return c, err
	}
	spec, ok := archSpecs[c.Arch]
	if !ok {
		return c, fmt.Errorf("%s: general.architecture %q: %w (the forward pass supports %s; use an imatrix file for others)", f.Path, c.Arch, ErrUnsupported, supportedArchs())
	}
	r := &keyReader{f: f, p: c.Arch + "."}
	r.uint("embedding_length", &c.NEmbd, 0, true)
	r.uint("block_count", &c.NLayer, 0, true)
	if r.err == nil && c.NLayer > len(f.Tensors) { // before anything sized by it is made
		r.err = fmt.Errorf("%s: key %q: %d blocks, but the file holds %d tensors (a block has several): %w",
			f.Path, r.p+"block_count", c.NLayer, len(f.Tensors), ErrBadModel)
	}
	r.uint("expert_count", &c.NExpert, 0, false)
	r.uint("expert_used_count", &c.NExpertUsed, 0, false)
	r.float("rope.freq_base", &c.RopeBase, 10000, false)
	c.RopeFreqScale = 1
	var groups int
	r.uint("expert_group_count", &groups, 0, false)
	if r.err != nil {
		return c, r.err
	}
	if groups > 1 {
		return c, fmt.Errorf("%s: %sexpert_group_count %d: %w (grouped expert routing is not implemented)", f.Path, r.p, groups, ErrUnsupported)
	}
	if v, ok := f.Lookup(r.p + "attention.causal"); ok {
		if causal, err := v.Bool(); err != nil || !causal {
			return c, fmt.Errorf("%s: %sattention.causal %v: %w (only causal models are implemented)", f.Path, r.p, v, ErrUnsupported)
		}
	}
	if r.has("rope.scaling.type") {
		typ, err := f.String(r.p + "rope.scaling.type")
		if err != nil {
			return c, err
		}
		switch typ {
		case "none":
		case "linear":
			var factor float32
			if r.float("rope.scaling.factor", &factor, 0, true); r.err != nil {
				return c, r.err
			}
			if factor > 0 {
				c.RopeFreqScale = 1 / factor
			}
		default:
			return c, fmt.Errorf("%s: %srope.scaling.type %q: %w (none and linear are implemented)", f.Path, r.p, typ, ErrUnsupported)
		}
	}
	if err := spec.config(r, &c); err != nil {
		return c, err
	}
	if r.err != nil {
		return c, r.err
	}
	if t, err := f.Tensor("rope_freqs.weight"); err == nil {
		if len(t.Shape) != 1 {
			return c, fmt.Errorf("%s: tensor rope_freqs.weight: shape %v, want one dimension: %w", f.Path, t.Shape, ErrBadModel)
		}
		c.RopeFreqFactors = make([]float32, t.Elements())
		if err := f.ReadRows(context.Background(), t, 0, c.RopeFreqFactors); err != nil {
			return c, err
		}
	} else if !errors.Is(err, gguf.ErrTensorNotFound) {
		return c, err
	}
	emb, err := f.Tensor("token_embd.weight")
	if err != nil {
		return c, err
	}
	if len(emb.Shape) != 2 || emb.Shape[0] != int64(c.NEmbd) {
		return c, fmt.Errorf("%s: tensor token_embd.weight: shape %v, want [%d, n_vocab]: %w", f.Path, emb.Shape, c.NEmbd, ErrBadModel)
	}
	c.NVocab = int(emb.Shape[1])
	c.WeightType = blockWeightType(f)
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", f.Path, err)
	}
	return c, nil
}

// attentionKeys reads the attention keys every architecture with attention blocks shares:
// head_count (scalar or per block), head_count_kv (default head_count; scalar or per block, 0 for a
// block without attention), key_length (default n_embd/head_count), value_length (must equal
// key_length) and rope.dimension_count (default key_length). It returns head_count_kv per block.
func attentionKeys(r *keyReader, c *Config) (kvPerLayer []int) {
	heads := r.perLayer("attention.head_count", c.NLayer, 0)
	c.NHead = r.uniform("attention.head_count", heads)
	if r.err == nil && c.NHead <= 0 {
		r.err = fmt.Errorf("%s: %sattention.head_count = %d: %w", r.f.Path, r.p, c.NHead, ErrBadModel)
	}
	kvPerLayer = r.perLayer("attention.head_count_kv", c.NLayer, c.NHead)
	c.NHeadKV = r.uniform("attention.head_count_kv", kvPerLayer)
	if r.err != nil {
		return kvPerLayer
	}
	r.uint("attention.key_length", &c.HeadDim, c.NEmbd/c.NHead, false)
	var vlen int
	r.uint("attention.value_length", &vlen, c.HeadDim, false)
	if r.err == nil && vlen != c.HeadDim {
		r.err = fmt.Errorf("%s: %sattention.value_length %d differs from key_length %d: %w", r.f.Path, r.p, vlen, c.HeadDim, ErrUnsupported)
	}
	r.uint("rope.dimension_count", &c.RopeDim, c.HeadDim, false)
	return kvPerLayer
}

// expertKeys reads the MoE keys of the hybrid architectures: expert_feed_forward_length (required
// when ffRequired, else default n_ff / expert_used_count as llama.cpp's qwen35moe) and
// expert_gating_func (required when gatingRequired, else softmax).
func expertKeys(r *keyReader, c *Config, ffRequired, gatingRequired bool) {
	def := 0
	if c.NExpertUsed > 0 {
		def = c.NFF / c.NExpertUsed
	}
	r.uint("expert_feed_forward_length", &c.NFFExp, def, ffRequired)
	var g int
	r.uint("expert_gating_func", &g, int(GatingSoftmax), gatingRequired)
	c.Gating = Gating(g)
}
