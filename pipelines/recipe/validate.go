package recipe

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// validName reports whether name matches ^[a-z0-9][a-z0-9._-]{0,63}$ (checked by hand: that
// regexp took 0.35 ms and 735 allocations to compile at the start of every orkpipe command).
func validName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// DTypes lists the pack dtypes a scheme may choose, with what each implies.
var DTypes = map[string]DTypeInfo{
	"I4_NATIVE": {Bits: 4, ActBits: 4},
	"I4":        {Bits: 4, ActBits: 8, Rotation: "none"},
	"I4_ROT_A8": {Bits: 4, ActBits: 8, Rotation: "hadamard"},
	"I8":        {Bits: 8, ActBits: 8, Rotation: "none"},
	"I8_ROT":    {Bits: 8, ActBits: 8, Rotation: "hadamard"},
	"F16":       {Bits: 16, ActBits: 16, Rotation: "none"},
}

// DTypeInfo is what a pack dtype implies: weight bits, activation bits, and the rotation it requires
// ("" = either).
type DTypeInfo struct {
	Bits, ActBits int
	Rotation      string
}

var groups = []int{0, 32, 64, 128, 256, 512}

// DefaultActSample is calibration.act_sample when a scheme searches its activation clip or sets
// gptq_inputs and the recipe does not say: activation rows kept per input site.
const DefaultActSample = 1024

// validate checks every field and fills defaults that follow from other fields.
func (r *Recipe) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if !validName(r.Name) {
		bad("name: %q: want 1-64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit", r.Name)
	}
	switch {
	case r.Source.Model == "" && r.Source.Synth == nil:
		bad("source: set model (a GGUF path) or synth (a shape and seed)")
	case r.Source.Model != "" && r.Source.Synth != nil:
		bad("source: set either model or synth, not both")
	case r.Source.Synth != nil:
		errs = append(errs, r.Source.Synth.validate())
	}
	if r.Board == "" {
		r.Board = "rk3588"
	}
	needCalib, useImatrix, search := false, false, false
	if len(r.Schemes) == 0 {
		bad("schemes: at least one rule is required")
	}
	for i := range r.Schemes {
		s := &r.Schemes[i]
		if err := s.validate(); err != nil {
			bad("schemes[%d] (match %q): %w", i, s.Match, err)
		}
		needCalib = needCalib || s.Method == "gptq" || s.Searches()
		search = search || s.SamplesInputs()
		if s.Importance == "imatrix" {
			useImatrix = true
			if r.Imatrix == "" {
				bad("schemes[%d] (match %q): importance imatrix: set the recipe's imatrix key to an importance-matrix file", i, s.Match)
			}
		}
	}
	if needCalib && r.Calibration == nil {
		if search && !slices.ContainsFunc(r.Schemes, func(s Scheme) bool { return s.Method == "gptq" }) {
			bad("calibration: required because a scheme uses act_clip: search (it searches on calibration activations)")
		} else if r.Imatrix != "" {
			bad("calibration: required because a scheme uses method gptq (an imatrix is not enough: it holds only diag(H), and GPTQ needs the off-diagonal terms of the Hessian)")
		} else {
			bad("calibration: required because a scheme uses method gptq")
		}
	}
	if r.Imatrix != "" && !useImatrix {
		bad("imatrix: %s is set but no scheme uses it (add importance: imatrix to the rtn schemes it should weight)", r.Imatrix)
	}
	if c := r.Calibration; c != nil {
		if c.Corpus == "" {
			bad("calibration.corpus: a text file is required")
		}
		if c.Sequences <= 0 {
			bad("calibration.sequences: want a positive number of sequences, got %d", c.Sequences)
		}
		if c.Ctx < 2 {
			bad("calibration.ctx: want a context of at least 2 tokens, got %d", c.Ctx)
		}
		if c.Mode == "" {
			c.Mode = "sequential"
		}
		if c.Mode != "sequential" && c.Mode != "oneshot" {
			bad("calibration.mode: want sequential or oneshot, got %q", c.Mode)
		}
		if !c.Window.Auto && c.Window.Layers == 0 {
			c.Window.Auto = true
		}
		switch {
		case c.ActSample < 0:
			bad("calibration.act_sample: want a positive number of activation rows per input site, got %d", c.ActSample)
		case c.ActSample > 0 && !search:
			bad("calibration.act_sample: %d set, but no scheme uses act_clip: search or gptq_inputs", c.ActSample)
		case c.ActSample == 0 && search:
			c.ActSample = DefaultActSample
		}
	}
	if p := r.Promote; p != nil {
		if info, ok := DTypes[p.To]; !ok || info.Bits != 8 && p.To != "I4_ROT_A8" {
			bad("promote.to: want a higher tier (I8, I8_ROT or I4_ROT_A8), got %q", p.To)
		}
		if p.BudgetMiB <= 0 {
			bad("promote.budget_mib: want a positive on-disk budget in MiB, got %g", p.BudgetMiB)
		}
		if p.Match == "" {
			p.Match = ".*"
		}
		re, err := regexp.Compile("^(?:" + p.Match + ")$")
		if err != nil {
			bad("promote.match: %v", err)
		}
		p.re = re
	}
	if s := r.Screen; s != nil {
		if s.Text == "" {
			bad("screen.text: an evaluation text file is required")
		}
		if s.Ctx < 4 {
			bad("screen.ctx: want a context of at least 4 tokens, got %d", s.Ctx)
		}
		if s.Chunks < 0 {
			bad("screen.chunks: want 0 (all) or a positive count, got %d", s.Chunks)
		}
		if s.Gates.MaxPPLRatio < 0 || s.Gates.MaxKLDMean < 0 {
			bad("screen.gates: thresholds must not be negative")
		}
	}
	if b := r.BoardVerify; b != nil {
		errs = append(errs, b.validate(r))
	}
	if res := r.Residency; res != nil {
		errs = append(errs, res.validate(r))
	}
	for i, err := range errs {
		if err != nil {
			errs[i] = r.explainCreated(err)
		}
	}
	return errors.Join(errs...)
}

// explainCreated adds to an error about a section that only exists because --set created it
// (the recipe had none) which assignment did, so "calibration.sequences: want a positive number"
// does not read as a fault of the recipe file.
func (r *Recipe) explainCreated(err error) error {
	msg, best := err.Error(), ""
	for sec := range r.created { // the innermost created section the message is about
		if (strings.HasPrefix(msg, sec+".") || strings.HasPrefix(msg, sec+":")) && len(sec) > len(best) {
			best = sec
		}
	}
	if best == "" {
		return err
	}
	return fmt.Errorf("%w (the recipe has no %s section; --set %s created one, so its other required fields are unset)", err, best, r.created[best])
}

func (s *Synth) validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("source.synth.%s: want a positive number, got %d", name, v))
		}
	}
	pos("layers", s.Layers)
	pos("n_embd", s.Embd)
	pos("n_ff", s.FF)
	pos("n_head", s.Heads)
	pos("vocab", s.Vocab)
	pos("ctx", s.Ctx)
	if s.HeadsKV == 0 {
		s.HeadsKV = s.Heads
	}
	switch s.Arch {
	case "":
		if s.Heads > 0 && (s.Embd%s.Heads != 0 || s.HeadsKV <= 0 || s.Heads%s.HeadsKV != 0) {
			errs = append(errs, fmt.Errorf("source.synth: n_embd (%d) must divide by n_head (%d), and n_head by n_head_kv (%d)", s.Embd, s.Heads, s.HeadsKV))
		}
	case "qwen35":
		pos("head_dim", s.HeadDim)
		pos("ssm_state_size", s.SSMHeadDim)
		pos("ssm_group_count", s.SSMKHeads)
		pos("ssm_time_step_rank", s.SSMVHeads)
	case "lfm2moe":
		pos("n_ff_exp", s.FFExp)
		if s.Experts == 0 {
			errs = append(errs, errors.New("source.synth.n_expert: an lfm2moe model has routed experts: want at least 2"))
		}
		if s.DenseLead < 0 || s.DenseLead > s.Layers {
			errs = append(errs, fmt.Errorf("source.synth.leading_dense_block_count: want 0..%d (layers), got %d", s.Layers, s.DenseLead))
		}
		for i, l := range s.AttnLayers {
			if l < 0 || l >= s.Layers || i > 0 && l <= s.AttnLayers[i-1] {
				errs = append(errs, fmt.Errorf("source.synth.attention_layers: %v: want increasing block indices below layers (%d)", s.AttnLayers, s.Layers))
				break
			}
		}
		if s.ShortConvL < 0 {
			errs = append(errs, fmt.Errorf("source.synth.shortconv_l_cache: want positive (default 3), got %d", s.ShortConvL))
		}
	default:
		errs = append(errs, fmt.Errorf("source.synth.arch: %q: want qwen35, lfm2moe, or none for a llama model", s.Arch))
	}
	if s.Arch != "lfm2moe" && (s.FFExp != 0 || s.DenseLead != 0 || s.AttnLayers != nil || s.ShortConvL != 0) {
		errs = append(errs, errors.New("source.synth: n_ff_exp, leading_dense_block_count, attention_layers and shortconv_l_cache are set only with arch: lfm2moe"))
	}
	if s.Type == "" {
		s.Type = "F32"
	}
	if s.Experts < 0 || s.Experts == 1 {
		errs = append(errs, fmt.Errorf("source.synth.n_expert: want 0 (dense) or at least 2 experts, got %d", s.Experts))
	}
	if s.Experts == 0 && s.ExpertsUsed != 0 {
		errs = append(errs, fmt.Errorf("source.synth.n_expert_used: %d set on a dense model (n_expert 0)", s.ExpertsUsed))
	}
	if s.Experts >= 2 {
		if s.ExpertsUsed == 0 {
			s.ExpertsUsed = 2
		}
		if s.ExpertsUsed < 1 || s.ExpertsUsed > s.Experts {
			errs = append(errs, fmt.Errorf("source.synth.n_expert_used: want 1..%d (n_expert), got %d", s.Experts, s.ExpertsUsed))
		}
	}
	if !slices.Contains([]string{"F32", "F16", "BF16", "Q8_0"}, s.Type) {
		errs = append(errs, fmt.Errorf("source.synth.type: want F32, F16, BF16 or Q8_0, got %q", s.Type))
	}
	return errors.Join(errs...)
}

func (s *Scheme) validate() error {
	var errs []error
	if s.Match == "" {
		errs = append(errs, errors.New("match: a regular expression is required"))
	} else if re, err := regexp.Compile("^(?:" + s.Match + ")$"); err != nil {
		errs = append(errs, fmt.Errorf("match: %w", err))
	} else {
		s.re = re
	}
	info, ok := DTypes[s.DType]
	if !ok {
		errs = append(errs, fmt.Errorf("dtype: want one of I4_NATIVE, I4, I4_ROT_A8, I8, I8_ROT, F16, got %q", s.DType))
	}
	if s.Method == "" {
		s.Method = "rtn"
	}
	if s.Method != "gptq" && s.Method != "rtn" {
		errs = append(errs, fmt.Errorf("method: want gptq or rtn, got %q", s.Method))
	}
	if !slices.Contains(groups, s.Group) {
		errs = append(errs, fmt.Errorf("group: want 0 (per channel), 32, 64, 128, 256 or 512, got %d", s.Group))
	}
	if ok {
		if s.Rotation == "" {
			s.Rotation = info.Rotation
			if s.Rotation == "" {
				s.Rotation = "none"
			}
		}
		if s.Rotation != "none" && s.Rotation != "hadamard" {
			errs = append(errs, fmt.Errorf("rotation: want none or hadamard, got %q", s.Rotation))
		} else if info.Rotation != "" && s.Rotation != info.Rotation {
			errs = append(errs, fmt.Errorf("rotation: dtype %s requires rotation %s, got %s", s.DType, info.Rotation, s.Rotation))
		}
		if s.ActBits == 0 {
			s.ActBits = info.ActBits
		}
		if s.ActBits != info.ActBits {
			errs = append(errs, fmt.Errorf("act_bits: dtype %s runs with %d-bit activations, got %d", s.DType, info.ActBits, s.ActBits))
		}
		if s.DType == "F16" && (s.Method == "gptq" || s.Group != 0) {
			errs = append(errs, errors.New("dtype F16 is stored unquantized: method gptq and group do not apply"))
		}
	}
	for _, c := range s.ClipGrid {
		if !(c > 0 && c <= 1) {
			errs = append(errs, fmt.Errorf("clip_grid: factors must be in (0, 1], got %g", c))
			break
		}
	}
	if s.Damp < 0 || s.Damp >= 1 {
		errs = append(errs, fmt.Errorf("damp: want a fraction in [0, 1) of mean(diag H), got %g", s.Damp))
	}
	switch s.Importance {
	case "", "none":
		s.Importance = ""
	case "imatrix":
		switch {
		case s.Method == "gptq":
			errs = append(errs, errors.New("importance imatrix with method gptq: an imatrix holds only diag(H), and GPTQ needs the full Hessian "+
				"(its off-diagonal terms) from calibration; use method rtn with the imatrix, or gptq without importance"))
		case s.DType == "F16":
			errs = append(errs, errors.New("importance imatrix with dtype F16: F16 is stored unquantized, there is no clip search to weight"))
		case s.Rotation == "hadamard":
			errs = append(errs, errors.New("importance imatrix with rotation hadamard: the rotation mixes every channel of a block, and the "+
				"rotated diag(H) needs the off-diagonal terms an imatrix does not have; use a dtype without rotation (I4_NATIVE, I4, I8) or method gptq"))
		}
	default:
		errs = append(errs, fmt.Errorf("importance: want none or imatrix, got %q", s.Importance))
	}
	if s.Damp == 0 && s.Method == "gptq" {
		s.Damp = 0.01
	}
	errs = append(errs, s.validateScale(info)...)
	switch {
	case !s.ActClip.IsZero() && s.DType == "F16":
		errs = append(errs, errors.New("act_clip with dtype F16: F16 activations are not quantized, there is nothing to clip"))
	case s.RotationSeed != "" && s.RotationSeed != "weight" && s.RotationSeed != "site":
		errs = append(errs, fmt.Errorf("rotation_seed: want weight or site, got %q", s.RotationSeed))
	case (s.RotationSeed != "" || s.RotationBlock != 0 || s.RotationSalt != "") && s.Rotation != "hadamard":
		errs = append(errs, fmt.Errorf("rotation_seed, rotation_block, rotation_salt: set, but rotation is %s", s.Rotation))
	case !validSalt(s.RotationSalt):
		errs = append(errs, fmt.Errorf("rotation_salt: want at most 64 letters, digits, '.', '_' or '-', got %q", s.RotationSalt))
	case s.RotationBlock != 0 && (s.RotationBlock < 32 || s.RotationBlock&(s.RotationBlock-1) != 0 || s.RotationBlock > 1<<16):
		errs = append(errs, fmt.Errorf("rotation_block: want a power of two from 32 to 65536, got %d", s.RotationBlock))
	case s.RotationSearch < 0 || s.RotationSearch > 64:
		errs = append(errs, fmt.Errorf("rotation_search: want 0..64 seeds, got %d", s.RotationSearch))
	case s.RotationSearch > 1 && (s.Method != "gptq" || s.Rotation != "hadamard"):
		errs = append(errs, fmt.Errorf("rotation_search: %d seeds with method %s, rotation %s: want gptq with hadamard (the search scores seeds against the calibration Hessian)", s.RotationSearch, s.Method, s.Rotation))
	case s.RotationSearch > 1 && s.RotationSeed == "site":
		errs = append(errs, errors.New("rotation_search with rotation_seed: site: a search picks each weight's own seed, the weights of a site would no longer share one"))
	case s.ScaleRefit < 0 || s.ScaleRefit > 4:
		errs = append(errs, fmt.Errorf("scale_refit: want 0..4 rounds, got %d", s.ScaleRefit))
	case s.ScaleRefit > 0 && (s.Method != "gptq" || s.ActOrder || s.DType == "F16"):
		errs = append(errs, fmt.Errorf("scale_refit with method %s, dtype %s, act_order %v: want a quantized gptq scheme without act_order (the refit solves GPTQ's scales against its factor of the Hessian, in natural column order)", s.Method, s.DType, s.ActOrder))
	case len(s.ActClipGrid) > 0 && !s.Searches():
		errs = append(errs, errors.New("act_clip_grid: set, but act_clip is not search"))
	}
	errs = append(errs, s.validateGPTQInputs()...)
	for _, c := range s.ActClipGrid {
		if !(c > 0 && c <= 1) {
			errs = append(errs, fmt.Errorf("act_clip_grid: ratios must be in (0, 1], got %g", c))
			break
		}
	}
	return errors.Join(errs...)
}

// validateScale checks scale_search and scale_sign: scale_search's default (weighted) is stored as "",
// scale_sign's as search for 4-bit GPTQ schemes and "" (positive, or nothing to choose) for the others.
func (s *Scheme) validateScale(info DTypeInfo) []error {
	var errs []error
	switch s.ScaleSearch {
	case "", "weighted":
		s.ScaleSearch = ""
	case "gptq":
		switch {
		case s.Method != "gptq":
			errs = append(errs, fmt.Errorf("scale_search gptq with method %s: it scores scales by GPTQ's loss; use method gptq or scale_search weighted", s.Method))
		case s.Group == 0:
			errs = append(errs, errors.New("scale_search gptq with group 0: it searches each group's scale as GPTQ reaches the group; set a group size"))
		case s.ActOrder:
			errs = append(errs, errors.New("scale_search gptq with act_order: act-order groups are static (their scales are fixed before GPTQ runs); drop one of them"))
		}
	default:
		errs = append(errs, fmt.Errorf("scale_search: want weighted or gptq, got %q", s.ScaleSearch))
	}
	switch s.ScaleSign {
	case "":
		// The default of 4-bit GPTQ weights: it lowered KLD in every measured case (docs/recipes.md), at a
		// cost GPTQ's row phase dwarfs; RTN's clip search would take twice as long, so RTN opts in.
		if info.Bits == 4 && s.Method == "gptq" {
			s.ScaleSign = "search"
		}
	case "positive":
	case "search":
		if info.Bits != 4 && info.Bits != 0 {
			errs = append(errs, fmt.Errorf("scale_sign search with dtype %s: only 4-bit codes have an asymmetric range ([-8, 7]) a negative scale can use", s.DType))
		}
	default:
		errs = append(errs, fmt.Errorf("scale_sign: want positive or search, got %q", s.ScaleSign))
	}
	return errs
}

// validateGPTQInputs checks gptq_inputs: float is stored as ""; quantized and asymmetric need method
// gptq, quantized activations and no act_order.
func (s *Scheme) validateGPTQInputs() []error {
	switch s.GPTQInputs {
	case "", "float":
		s.GPTQInputs = ""
		return nil
	case "quantized", "asymmetric":
	default:
		return []error{fmt.Errorf("gptq_inputs: want float, quantized or asymmetric, got %q", s.GPTQInputs)}
	}
	switch {
	case s.Method != "gptq":
		return []error{fmt.Errorf("gptq_inputs %s with method %s: it changes GPTQ's objective; use method gptq", s.GPTQInputs, s.Method)}
	case s.DType == "F16":
		return []error{fmt.Errorf("gptq_inputs %s with dtype F16: F16 activations are not quantized", s.GPTQInputs)}
	case s.ActOrder:
		return []error{fmt.Errorf("gptq_inputs %s with act_order: not supported (the act-order permutation would have to follow the input target); drop one of them", s.GPTQInputs)}
	}
	return nil
}

// validSalt reports whether salt can be a rotation_salt: empty (none), or 1 to 64 characters of
// [A-Za-z0-9._-], so that a salt reads the same in a recipe, a --set and a report.
func validSalt(salt string) bool {
	if len(salt) > 64 {
		return false
	}
	for _, c := range salt {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
