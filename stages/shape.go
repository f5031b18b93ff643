package stages

import (
	"fmt"
	"strings"

	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
)

// ModelShape is the shape of the source model, carried in the parameters of the stages whose
// memory estimate or outputs depend on it. It is derived from the source model (whose digest is
// key material anyway), so it never makes two builds of one model differ.
type ModelShape struct {
	Layers  int `json:"layers"`
	Embd    int `json:"n_embd"`
	FF      int `json:"n_ff"`
	Heads   int `json:"n_head"`
	HeadsKV int `json:"n_head_kv"`
	HeadDim int `json:"head_dim"`
	Vocab   int `json:"vocab"`
	// Experts and ExpertsUsed are expert_count and expert_used_count of a mixture-of-experts model (0
	// for a dense one; omitted then, so dense models keep their keys). FF is then one expert's width
	// unless ExpertFF says otherwise.
	Experts     int `json:"n_expert,omitempty"`
	ExpertsUsed int `json:"n_expert_used,omitempty"`
	// WeightType is the widest encoding the calibrate and propagate stages hold the block matmul weights
	// in (model.Config.WeightType: a quantized or 16-bit GGUF type name such as "Q8_0"); omitted when
	// they are held as float32 (F32 sources, and shapes planned without it), which the memory estimates
	// then assume. A model whose weights take more bytes a value than this is refused when a stage runs.
	WeightType string `json:"weight_type,omitempty"`

	// The hybrid architectures (qwen35, qwen35moe, lfm2, lfm2moe; all omitted for the llama family, whose
	// keys stay as they were): Arch is general.architecture and Kinds the block kinds, two letters per
	// block — the mixer (A attention, G gated attention, D Gated DeltaNet, C short convolution) and the
	// FFN (d dense, m mixture of experts), e.g. "DdDdDdGd" for qwen35's first four blocks twice.
	Arch  string `json:"arch,omitempty"`
	Kinds string `json:"kinds,omitempty"`
	// ExpertFF and SharedFF are expert_feed_forward_length and the shared expert's width (qwen35moe).
	ExpertFF int `json:"n_ff_exp,omitempty"`
	SharedFF int `json:"n_ff_shexp,omitempty"`
	// The Gated DeltaNet blocks' ssm.conv_kernel, ssm.state_size, ssm.group_count, ssm.time_step_rank.
	SSMConv    int `json:"ssm_conv_kernel,omitempty"`
	SSMHeadDim int `json:"ssm_state_size,omitempty"`
	SSMKHeads  int `json:"ssm_group_count,omitempty"`
	SSMVHeads  int `json:"ssm_time_step_rank,omitempty"`
	// ShortConvL is the short-convolution blocks' shortconv.l_cache.
	ShortConvL int `json:"shortconv_l_cache,omitempty"`
	// NextN is the multi-token-prediction blocks after the Layers trunk blocks (model.Config.NextN;
	// omitted when none): no stage runs them, and the planner never packs their tensors.
	NextN int `json:"nextn,omitempty"`
}

// kindLetters are the letters of ModelShape.Kinds, by mixer and by FFN kind.
var (
	mixerLetters = map[model.Mixer]byte{model.MixerAttention: 'A', model.MixerGatedAttention: 'G', model.MixerDeltaNet: 'D', model.MixerShortConv: 'C'}
	ffnLetters   = map[model.FFNKind]byte{model.FFNDense: 'd', model.FFNMoE: 'm'}
)

// ShapeOf returns the shape of a model config.
func ShapeOf(c model.Config) ModelShape {
	s := ModelShape{Layers: c.NLayer, Embd: c.NEmbd, FF: c.NFF, Heads: c.NHead, HeadsKV: c.NHeadKV, HeadDim: c.HeadDim, Vocab: c.NVocab,
		Experts: c.NExpert, ExpertsUsed: c.NExpertUsed, WeightType: weightTypeName(c.WeightType), NextN: c.NextN}
	if c.Kinds == nil {
		return s
	}
	var b strings.Builder
	for _, k := range c.Kinds {
		b.WriteByte(mixerLetters[k.Mixer])
		b.WriteByte(ffnLetters[k.FFN])
	}
	s.Arch, s.Kinds = c.Arch, b.String()
	s.ExpertFF, s.SharedFF = c.NFFExp, c.NFFShared
	s.SSMConv, s.SSMHeadDim, s.SSMKHeads, s.SSMVHeads = c.SSM.ConvKernel, c.SSM.HeadDim, c.SSM.KHeads, c.SSM.VHeads
	s.ShortConvL = c.ShortConvL
	return s
}

// kinds decodes Kinds (nil when empty: the llama family's uniform blocks).
func (s ModelShape) kinds() ([]model.LayerKind, error) {
	if s.Kinds == "" {
		return nil, nil
	}
	if len(s.Kinds) != 2*s.Layers {
		return nil, fmt.Errorf("shape: kinds %q: want two letters per block (%d blocks)", s.Kinds, s.Layers)
	}
	out := make([]model.LayerKind, s.Layers)
	for l := range out {
		m, f := s.Kinds[2*l], s.Kinds[2*l+1]
		okM, okF := false, false
		for k, v := range mixerLetters {
			if v == m {
				out[l].Mixer, okM = k, true
			}
		}
		for k, v := range ffnLetters {
			if v == f {
				out[l].FFN, okF = k, true
			}
		}
		if !okM || !okF {
			return nil, fmt.Errorf("shape: kinds %q: block %d is %q: want a mixer letter (A, G, D, C) and an FFN letter (d, m)", s.Kinds, l, s.Kinds[2*l:2*l+2])
		}
	}
	return out, nil
}

func weightTypeName(t gguf.Type) string {
	if !model.KeepsEncoded(t) {
		return ""
	}
	return t.String()
}

// weightType returns the gguf type WeightType names (F32 when it is empty).
func (s ModelShape) weightType() (gguf.Type, error) {
	if s.WeightType == "" {
		return gguf.TypeF32, nil
	}
	t, err := gguf.ParseType(s.WeightType)
	if err != nil || !model.KeepsEncoded(t) {
		return t, fmt.Errorf("shape: weight_type %q: want a quantized or 16-bit GGUF type orkpipe dequantizes (Q8_0, Q4_0, F16, BF16, ...), or no weight_type for float32", s.WeightType)
	}
	return t, nil
}

// checkModel checks that a model opened by a stage has the planned shape: every field equal, and
// weights taking at most WeightType's bytes a value (the plan's memory estimate is an upper bound).
func (s ModelShape) checkModel(path string, c model.Config) error {
	got := ShapeOf(c)
	want := s.WeightType
	got.WeightType, s.WeightType = "", ""
	if got != s {
		return fmt.Errorf("model %s has shape %+v, the plan says %+v", path, got, s)
	}
	pt, err := ModelShape{WeightType: want}.weightType()
	if err != nil {
		return err
	}
	mt := c.WeightType
	if !model.KeepsEncoded(mt) {
		mt = gguf.TypeF32
	}
	if mt.BlockBytes()*pt.BlockSize() > pt.BlockBytes()*mt.BlockSize() {
		return fmt.Errorf("model %s: block weights stored up to %s, wider than the plan's weight_type %q (its memory estimate would not hold)", path, mt, want)
	}
	return nil
}

// Config returns a model config of the shape: enough for the sites of every block and the memory
// estimates (rope, norm epsilon and gating take neutral values; the stages read the real ones from the
// model).
func (s ModelShape) Config() model.Config {
	arch := s.Arch
	if arch == "" {
		arch = "llama"
	}
	kinds, _ := s.kinds() // validate reports a bad one
	return model.Config{Arch: arch, NEmbd: s.Embd, NFF: s.FF, NLayer: s.Layers, NHead: s.Heads, NHeadKV: s.HeadsKV,
		HeadDim: s.HeadDim, NVocab: s.Vocab, RopeDim: s.HeadDim, RopeBase: 10000, RopeFreqScale: 1, RopeNeox: s.Arch != "", NormEps: 1e-5,
		NExpert: s.Experts, NExpertUsed: s.ExpertsUsed, NFFExp: s.ExpertFF, NFFShared: s.SharedFF, Kinds: kinds,
		SSM:        model.SSMShape{ConvKernel: s.SSMConv, HeadDim: s.SSMHeadDim, KHeads: s.SSMKHeads, VHeads: s.SSMVHeads},
		ShortConvL: s.ShortConvL, WeightType: s.heldType(), NextN: s.NextN}
}

// heldType is weightType, F32 for an invalid one (validate refuses it).
func (s ModelShape) heldType() gguf.Type {
	t, err := s.weightType()
	if err != nil {
		return gguf.TypeF32
	}
	return t
}

// blockWeights returns the number of matmul weight values of the largest block of the shape: those a
// pack may hold (every site weight of a captured site, every expert slice) and those of the MoE router
// (kept float).
func (s ModelShape) blockWeights() (packable, router int64) {
	c := s.Config()
	for l := 0; l < c.NLayer; l++ {
		var p, r int64
		for _, site := range c.Sites(l) {
			for _, m := range site.Weights {
				n := int64(m.N) * int64(site.Width) * int64(max(1, site.Experts))
				if calib.Captured(site) {
					p += n
				} else {
					r += n
				}
			}
		}
		packable, router = max(packable, p), max(router, r)
	}
	return packable, router
}

func (s ModelShape) validate() error {
	if _, err := s.kinds(); err != nil {
		return err
	}
	if (s.Arch == "") != (s.Kinds == "") {
		return fmt.Errorf("shape: arch %q with kinds %q: a hybrid shape sets both, the llama family neither", s.Arch, s.Kinds)
	}
	if s.NextN < 0 || s.NextN > 0 && s.Arch != "qwen35" && s.Arch != "qwen35moe" {
		return fmt.Errorf("shape: nextn %d for arch %q: want 0, or a count of qwen35's multi-token-prediction blocks", s.NextN, s.Arch)
	}
	c := s.Config()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("shape: %w", err)
	}
	_, err := s.weightType()
	return err
}
