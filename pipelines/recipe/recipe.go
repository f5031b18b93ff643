// Package recipe reads and validates build recipes: the short YAML file a release engineer writes to say
// which model to pack, how to calibrate it, how each tensor class is quantized, how the result is screened
// and where it goes. docs/recipes.md documents every key.
//
// Decoding is strict: unknown keys, duplicate keys and wrong types are errors that carry the line and
// column. Relative paths in the recipe resolve against its folder, relative paths given by an override
// against the working directory. Any key can be overridden by its dotted path
// (Set), e.g. "source.model=/models/q8.gguf" or "schemes.0.group=64"; an override is decoded as YAML into
// the field's type, so it is validated exactly like the file.
package recipe

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/goccy/go-yaml"
)

// ErrInvalid is wrapped by every recipe validation error.
var ErrInvalid = errors.New("invalid recipe")

// Recipe is a decoded, validated build recipe. Paths in it are absolute after Load.
type Recipe struct {
	Name        string       `yaml:"name" json:"name"`
	Source      Source       `yaml:"source" json:"source"`
	Board       string       `yaml:"board" json:"board"`
	Calibration *Calibration `yaml:"calibration" json:"calibration,omitempty"`
	// Imatrix is a llama.cpp importance matrix (GGUF or legacy .dat form): diag(H) per weight, used by
	// the schemes that say importance: imatrix.
	Imatrix     string       `yaml:"imatrix" json:"imatrix,omitempty"`
	Schemes     []Scheme     `yaml:"schemes" json:"schemes"`
	Promote     *Promote     `yaml:"promote" json:"promote,omitempty"`
	Screen      *Screen      `yaml:"screen" json:"screen,omitempty"`
	BoardVerify *BoardVerify `yaml:"board_verify" json:"board_verify,omitempty"`
	Residency   *Residency   `yaml:"residency" json:"residency,omitempty"`
	Output      string       `yaml:"output" json:"output"`

	// Path is the recipe file the recipe was read from ("" when decoded from bytes).
	Path string `yaml:"-" json:"-"`

	// created lists the sections (dotted paths) that Set had to create because the recipe did not
	// have them, each with the assignment that did: their errors say so.
	created map[string]string
}

// Source names the model to pack: a GGUF file, or a synthetic model generated from a shape and a seed.
type Source struct {
	Model string `yaml:"model" json:"model,omitempty"`
	Synth *Synth `yaml:"synth" json:"synth,omitempty"`
}

// Synth is the shape and seed of a deterministic synthetic model: llama-family, with arch: qwen35
// the Qwen3.5 dense hybrid, with arch: lfm2moe the LFM2 MoE hybrid (stages.SynthParams says what each
// field means).
type Synth struct {
	Layers  int    `yaml:"layers" json:"layers"`
	Embd    int    `yaml:"n_embd" json:"n_embd"`
	FF      int    `yaml:"n_ff" json:"n_ff"`
	Heads   int    `yaml:"n_head" json:"n_head"`
	HeadsKV int    `yaml:"n_head_kv" json:"n_head_kv"`
	Vocab   int    `yaml:"vocab" json:"vocab"`
	Ctx     int    `yaml:"ctx" json:"ctx"`
	Type    string `yaml:"type" json:"type"` // F32, F16, BF16 or Q8_0
	Seed    uint64 `yaml:"seed" json:"seed"`
	// Experts > 0 makes every block's FFN a mixture of experts (llama.cpp's llama-arch MoE layout),
	// ExpertsUsed of them routed per token (default 2, at most Experts).
	Experts     int `yaml:"n_expert" json:"n_expert,omitempty"`
	ExpertsUsed int `yaml:"n_expert_used" json:"n_expert_used,omitempty"`
	// RouterSkew > 0 biases an MoE model's routing on purpose: each block's experts get Zipf-like
	// popularity of about this exponent (0: none).
	RouterSkew float64 `yaml:"router_skew" json:"router_skew,omitempty"`
	// Arch qwen35: every full_attention_interval-th block (default 4) gated attention of n_head heads of
	// head_dim, the others Gated DeltaNet blocks of ssm_group_count key heads and ssm_time_step_rank
	// value heads of ssm_state_size, with a causal convolution of ssm_conv_kernel taps (default 4).
	Arch             string `yaml:"arch" json:"arch,omitempty"`
	HeadDim          int    `yaml:"head_dim" json:"head_dim,omitempty"`
	FullAttnInterval int    `yaml:"full_attention_interval" json:"full_attention_interval,omitempty"`
	SSMConv          int    `yaml:"ssm_conv_kernel" json:"ssm_conv_kernel,omitempty"`
	SSMHeadDim       int    `yaml:"ssm_state_size" json:"ssm_state_size,omitempty"`
	SSMKHeads        int    `yaml:"ssm_group_count" json:"ssm_group_count,omitempty"`
	SSMVHeads        int    `yaml:"ssm_time_step_rank" json:"ssm_time_step_rank,omitempty"`
	// Arch lfm2moe: the blocks in attention_layers attention, the others short convolutions of
	// shortconv_l_cache taps (default 3); the first leading_dense_block_count blocks a dense FFN of
	// n_ff, the others n_expert routed experts of n_ff_exp.
	FFExp      int   `yaml:"n_ff_exp" json:"n_ff_exp,omitempty"`
	DenseLead  int   `yaml:"leading_dense_block_count" json:"leading_dense_block_count,omitempty"`
	AttnLayers []int `yaml:"attention_layers" json:"attention_layers,omitempty"`
	ShortConvL int   `yaml:"shortconv_l_cache" json:"shortconv_l_cache,omitempty"`
}

// Calibration says how Hessians are collected for GPTQ.
type Calibration struct {
	Corpus    string `yaml:"corpus" json:"corpus"`
	Sequences int    `yaml:"sequences" json:"sequences"`
	Ctx       int    `yaml:"ctx" json:"ctx"`
	Mode      string `yaml:"mode" json:"mode"` // sequential | oneshot
	Window    Window `yaml:"window" json:"window"`
	// ActSample is how many activation rows per input site calibration keeps for the schemes with
	// act_clip: search or gptq_inputs (default 1024 when one has it; 0 otherwise).
	ActSample int `yaml:"act_sample" json:"act_sample,omitempty"`
}

// Window is a calibration window: a number of layers, or auto (sized from the memory budget).
type Window struct {
	Auto   bool
	Layers int
}

// UnmarshalYAML accepts a positive integer or the word auto.
func (w *Window) UnmarshalYAML(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err == nil && s == "auto" {
		*w = Window{Auto: true}
		return nil
	}
	var n int
	if err := yaml.Unmarshal(b, &n); err != nil || n <= 0 {
		return fmt.Errorf("window: want a positive number of layers or auto, got %s", string(b))
	}
	*w = Window{Layers: n}
	return nil
}

// MarshalYAML writes auto or the number.
func (w Window) MarshalYAML() (any, error) {
	if w.Auto {
		return "auto", nil
	}
	return w.Layers, nil
}

// MarshalJSON writes "auto" or the number (key material for plans).
func (w Window) MarshalJSON() ([]byte, error) {
	if w.Auto {
		return []byte(`"auto"`), nil
	}
	return []byte(fmt.Sprint(w.Layers)), nil
}

// Scheme is one quantization rule. Rules are tried in order; the first whose Match matches a weight's
// name decides how it is quantized.
type Scheme struct {
	Match    string    `yaml:"match" json:"match"`       // regular expression, matched against the whole tensor name
	Method   string    `yaml:"method" json:"method"`     // gptq | rtn
	DType    string    `yaml:"dtype" json:"dtype"`       // I4_NATIVE | I4 | I4_ROT_A8 | I8 | I8_ROT | F16
	Group    int       `yaml:"group" json:"group"`       // 0 = per output channel; else 32, 64, 128, 256, 512
	Rotation string    `yaml:"rotation" json:"rotation"` // none | hadamard (implied by the dtype except for I4_NATIVE)
	ActBits  int       `yaml:"act_bits" json:"act_bits"` // 4 | 8 (implied by the dtype)
	ClipGrid []float64 `yaml:"clip_grid" json:"clip_grid,omitempty"`
	Damp     float64   `yaml:"damp" json:"damp,omitempty"`
	ActOrder bool      `yaml:"act_order" json:"act_order,omitempty"`
	// Importance weights the RTN clip search and qerr: "" or none (unweighted), or imatrix (diag(H)
	// from the recipe's imatrix, llama-quantize's semantics). GPTQ always uses the full Hessian.
	Importance string `yaml:"importance" json:"importance,omitempty"`
	// ScaleSearch is how each group's scale is chosen among the clip grid's candidates: weighted (the
	// group's squared error weighted by diag(H) or the importance; stored as "") or gptq (GPTQ's loss
	// over the group, with the error fed forward through the inverse Hessian; method gptq, a group
	// size, no act_order).
	ScaleSearch string `yaml:"scale_search" json:"scale_search,omitempty"`
	// ScaleSign is search (the default of 4-bit GPTQ schemes) or positive (stored as "" when defaulted:
	// RTN schemes, 8-bit and F16 dtypes): with search, 4-bit weights also try each clip factor with a
	// negated scale, so the group's largest-magnitude value may take code -8 whatever its sign.
	ScaleSign string `yaml:"scale_sign" json:"scale_sign,omitempty"`
	// ActClip is the activation clip the board applies to the weights' inputs (docs/orkpack.md 2.4): a
	// fixed ratio in (0, 1] (unset: 1, none) or search (per weight, on calibration activations).
	ActClip ActClip `yaml:"act_clip" json:"act_clip,omitzero"`
	// RotationSeed says what a rotated weight's sign seed derives from: weight (default: its own name) or
	// site (its input site's: the weights reading one activation row share one rotation).
	RotationSeed string `yaml:"rotation_seed" json:"rotation_seed,omitempty"`
	// RotationSalt, when set, is written before the name a rotated weight's sign seed derives from: another
	// salt is another sign set for every weight of the scheme (the rotation's signs are noise of their own,
	// docs/recipes.md "Rotation levers"). Letters, digits, '.', '_' and '-', at most 64.
	RotationSalt string `yaml:"rotation_salt" json:"rotation_salt,omitempty"`
	// RotationBlock is the smallest Hadamard block of a rotated weight (a power of two >= 32, default 32):
	// K is zero-padded further when its largest power-of-two block is smaller (quant.NewRotationMinBlock).
	RotationBlock int `yaml:"rotation_block" json:"rotation_block,omitempty"`
	// RotationSearch is the number of rotation sign seeds tried per weight before GPTQ runs once with the
	// one whose RTN weights have the least calibrated output error (0 or 1: the weight's seed alone; gptq
	// with hadamard only).
	RotationSearch int `yaml:"rotation_search" json:"rotation_search,omitempty"`
	// ActClipGrid is the ratios act_clip: search tries (default 1.0 down to 0.5 in steps of 0.025).
	ActClipGrid []float64 `yaml:"act_clip_grid" json:"act_clip_grid,omitempty"`
	// GPTQInputs is what GPTQ takes the weight's inputs to be (method gptq, quantized activations):
	// float (stored "": the calibration Hessian), quantized (the Hessian of the inputs as the board
	// quantizes them: rotated, clipped, per token) or asymmetric (the quantized weight on quantized
	// inputs fitted to the float weight on float inputs). Both need the activation sample
	// (calibration.act_sample) of the weight's input site.
	GPTQInputs string `yaml:"gptq_inputs" json:"gptq_inputs,omitempty"`
	// ScaleRefit (method gptq, no act_order) refits each row's group scales after GPTQ, codes fixed,
	// to the least calibrated output error (0: off; 1: once; 2..4: that many rounds of GPTQ codes and
	// refitted scales, each row keeping its better round; quant.WithScaleRefit).
	ScaleRefit int `yaml:"scale_refit" json:"scale_refit,omitempty"`

	re *regexp.Regexp
}

// ActClip is a scheme's activation clip: a fixed Ratio in (0, 1], or Search. The zero value is unset
// (the weights run unclipped).
type ActClip struct {
	Search bool
	Ratio  float64
}

// IsZero reports whether the clip is unset.
func (a ActClip) IsZero() bool { return !a.Search && a.Ratio == 0 }

// UnmarshalYAML accepts a number or the word search.
func (a *ActClip) UnmarshalYAML(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err == nil && s == "search" {
		*a = ActClip{Search: true}
		return nil
	}
	var f float64
	if err := yaml.Unmarshal(b, &f); err != nil || !(f > 0 && f <= 1) {
		return fmt.Errorf("act_clip: want a ratio in (0, 1] or search, got %s", string(b))
	}
	*a = ActClip{Ratio: f}
	return nil
}

// MarshalYAML writes search or the ratio.
func (a ActClip) MarshalYAML() (any, error) {
	if a.Search {
		return "search", nil
	}
	return a.Ratio, nil
}

// MarshalJSON writes "search" or the ratio (key material for plans).
func (a ActClip) MarshalJSON() ([]byte, error) {
	if a.Search {
		return []byte(`"search"`), nil
	}
	return json.Marshal(a.Ratio)
}

// Searches reports whether the scheme searches its activation clip.
func (s *Scheme) Searches() bool { return s.ActClip.Search }

// SamplesInputs reports whether the scheme needs the activation sample of its weights' inputs: it
// searches the activation clip, or GPTQ sees quantized inputs.
func (s *Scheme) SamplesInputs() bool { return s.ActClip.Search || s.GPTQInputs != "" }

// Matches reports whether the rule applies to the tensor name (the whole name must match).
func (s *Scheme) Matches(name string) bool { return s.re != nil && s.re.MatchString(name) }

// Promote moves the worst-qerr weights among those matching Match to the tier To until BudgetMiB of
// extra on-disk bytes is spent.
type Promote struct {
	Match     string  `yaml:"match" json:"match"`
	To        string  `yaml:"to" json:"to"`
	BudgetMiB float64 `yaml:"budget_mib" json:"budget_mib"`

	re *regexp.Regexp
}

// Matches reports whether a weight is a promotion candidate.
func (p *Promote) Matches(name string) bool { return p.re != nil && p.re.MatchString(name) }

// Screen is the offline quality gate.
type Screen struct {
	Text   string `yaml:"text" json:"text"`
	Ctx    int    `yaml:"ctx" json:"ctx"`
	Chunks int    `yaml:"chunks" json:"chunks,omitempty"` // 0 = every chunk of the text
	Gates  Gates  `yaml:"gates" json:"gates"`
}

// Gates fail the build when exceeded. Zero means no gate.
type Gates struct {
	MaxPPLRatio float64 `yaml:"max_ppl_ratio" json:"max_ppl_ratio,omitempty"`
	MaxKLDMean  float64 `yaml:"max_kld_mean" json:"max_kld_mean,omitempty"`
}

// Load reads, applies the overrides to, and validates the recipe at path.
func Load(path string, sets ...string) (*Recipe, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading recipe: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", path, err)
	}
	return Parse(data, abs, sets...)
}

// Parse decodes a recipe from data. path is the recipe's (absolute) file name; relative paths written
// in the recipe resolve against its folder. Overrides ("dotted.path=value") are applied before
// validation; a relative path given by an override resolves against the working directory, as any
// path on a command line does.
func Parse(data []byte, path string, sets ...string) (*Recipe, error) {
	r := &Recipe{Path: path}
	if err := decodeStrict(data, r); err != nil {
		return nil, fmt.Errorf("%w %s:\n%s", ErrInvalid, displayPath(path), formatYAMLError(err))
	}
	dir := "."
	if path != "" {
		dir = filepath.Dir(path)
	}
	r.resolvePaths(dir)
	for _, s := range sets {
		if err := r.Set(s); err != nil {
			return nil, err
		}
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalid, displayPath(path), err)
	}
	if len(sets) > 0 {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("resolving the paths of --set overrides: %w", err)
		}
		r.resolvePaths(wd)
	}
	return r, nil
}

func displayPath(p string) string {
	if p == "" {
		return "(inline)"
	}
	return p
}

// resolvePaths makes every relative path of r absolute against dir.
func (r *Recipe) resolvePaths(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	abs(&r.Source.Model)
	abs(&r.Imatrix)
	if r.Calibration != nil {
		abs(&r.Calibration.Corpus)
	}
	if r.Screen != nil {
		abs(&r.Screen.Text)
	}
	if r.Board != "" && r.Board != "rk3588" {
		abs(&r.Board)
	}
	if r.Output != "" {
		abs(&r.Output)
	}
	if b := r.BoardVerify; b != nil {
		abs(&b.Text)
		abs(&b.Trust)
	}
}

// SchemeFor returns the first rule matching name, or nil when no rule applies.
func (r *Recipe) SchemeFor(name string) *Scheme {
	for i := range r.Schemes {
		if r.Schemes[i].Matches(name) {
			return &r.Schemes[i]
		}
	}
	return nil
}
