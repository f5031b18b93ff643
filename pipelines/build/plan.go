package build

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"orkpipe/internal/units"
	"orkpipe/ork/board"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
	"orkpipe/stages"
)

// source is the planned model: where its bytes come from, its tensors and its shape.
type source struct {
	in      engine.Input
	uri     string
	tensors []gguf.TensorInfo
	shape   stages.ModelShape
	meta    sourceMeta
	// dataOffset and size place the source's tensor data (its header is [0, dataOffset)); for a
	// synthetic source, where synth will place them (gguf.Plan of its header).
	dataOffset, size int64
}

// weight is one packed matmul weight (a 2-D tensor, or one expert slice of an MoE expert tensor)
// with its finalize parameters.
type weight struct {
	name    string // the pack entry: the tensor name, or "<tensor>#<e>" for expert e
	tensor  string
	expert  int // -1 for a 2-D weight
	nmat    int // matrices in the tensor: 1, or n_expert
	layer   int // -1 for weights outside the blocks
	fin     stages.FinalizeParams
	promote *stages.FinalizeParams
	// clip and pclip search the activation clip of the weight and of its promoted twin after finalize
	// (act_clip: search), on calibrate output acts; nil otherwise.
	clip, pclip *stages.ActClipParams
	acts        string
	tiled       engine.Input
	ptiled      engine.Input
	final       engine.Input // the finalized weight (after its activation clip search, when it has one)
	pfinal      engine.Input // the promoted twin's
	// fused and pfused: the weight (its promoted twin) is finalized and tiled by one rtn-tile node, so
	// final (pfinal) is unset.
	fused, pfused bool
}

func (t *Target) planSource(ctx context.Context, g *engine.Graph) (*source, error) {
	r := t.r
	if s := r.Source.Synth; s != nil {
		sp := stages.SynthParams{Layers: s.Layers, Embd: s.Embd, FF: s.FF, Heads: s.Heads, HeadsKV: s.HeadsKV, Vocab: s.Vocab,
			Ctx: s.Ctx, Type: s.Type, Seed: s.Seed, Experts: s.Experts, ExpertsUsed: s.ExpertsUsed, RouterSkew: s.RouterSkew, Arch: s.Arch, HeadDim: s.HeadDim,
			FullAttnInterval: s.FullAttnInterval, SSMConv: s.SSMConv, SSMHeadDim: s.SSMHeadDim, SSMKHeads: s.SSMKHeads, SSMVHeads: s.SSMVHeads,
			FFExp: s.FFExp, DenseLead: s.DenseLead, AttnLayers: s.AttnLayers, ShortConvL: s.ShortConvL}
		if err := sp.Validate(); err != nil {
			return nil, fmt.Errorf("%w: source.synth: %w", ErrPlan, err)
		}
		// The file synth writes, placed as gguf.Write will place it: the stub's declaration counts its
		// header and tensor ranges as a GGUF source's.
		l, _, err := gguf.Plan(sp.Header())
		if err != nil {
			return nil, fmt.Errorf("%w: source.synth: %w", ErrPlan, err)
		}
		ts := l.Tensors
		n := g.Add("synth", "synth", sp, nil).Cost(t.costs.synth(tensorBytes(ts))).Writes(l.Size)
		pj, _ := json.Marshal(sp)
		arch := sp.Arch
		if arch == "" {
			arch = "llama"
		}
		meta := sourceMeta{name: sp.ModelName(), arch: arch, params: tensorParams(ts)}
		return &source{in: n.Output("model.gguf"), uri: "orkpipe:synth?" + string(pj), tensors: ts, shape: stages.ShapeOf(sp.Config()), meta: meta,
			dataOffset: l.DataOffset, size: l.Size}, nil
	}
	f, err := openModel(ctx, r.Source.Model)
	if err != nil {
		return nil, fmt.Errorf("%w: source.model: %w", ErrPlan, err)
	}
	defer f.Close()
	cfg, err := model.ConfigFromGGUF(f)
	if err == nil {
		err = cfg.CheckTensors(f)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: source.model: %w", ErrPlan, err) // the error names the file
	}
	meta, err := readSourceMeta(f, cfg.Arch)
	if err != nil {
		return nil, fmt.Errorf("%w: source.model: %w", ErrPlan, err)
	}
	return &source{in: engine.File(r.Source.Model), uri: "file://" + r.Source.Model, tensors: f.Tensors, shape: stages.ShapeOf(cfg), meta: meta,
		dataOffset: f.DataOffset, size: f.Size}, nil
}

// rotationSeed derives a weight's rotation sign seed from its name (FNV-1a), so that every build of
// the same weight uses the same rotation.
func rotationSeed(name string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return h
}

// siteSeedName returns the name the rotation seed of weight name is derived from under rotation_seed:
// site: its input site in its block ("blk.3.attn_qkv" for attn_q, attn_k and attn_v), so the weights
// reading one activation row share its rotation; a weight outside the blocks is its own site.
func siteSeedName(shape stages.ModelShape, name string) string {
	c := shape.Config()
	l, in, _, ok := c.SiteOf(name)
	if !ok {
		return name
	}
	return fmt.Sprintf("blk.%d.%s", l, c.Sites(l)[in].Name)
}

// finalizeParams turns a scheme into the finalize parameters of one weight, keeping only the fields
// that change the result (damping and act-order mean nothing to RTN; F16 is not quantized). The rotation
// seed derives from seedName (the weight's name, or its site's under rotation_seed: site, after the
// scheme's rotation_salt).
func finalizeParams(s *recipe.Scheme, name, seedName string, n, k int) stages.FinalizeParams {
	p := stages.FinalizeParams{Tensor: name, Method: s.Method, DType: s.DType, Group: s.Group, Rotation: s.Rotation,
		ActBits: s.ActBits, ClipGrid: s.ClipGrid, N: n, K: k}
	if s.DType == "F16" {
		p.Method, p.Rotation, p.ClipGrid = "none", "none", nil
		return p
	}
	if s.Method == "gptq" {
		p.Damp, p.ActOrder, p.ScaleSearch, p.ScaleRefit = s.Damp, s.ActOrder, s.ScaleSearch, s.ScaleRefit
		if p.ScaleRefit > 0 {
			p.RefitSteps, p.RefitVersion = quant.DefaultRefitSteps, quant.RefitVersion
		}
		if p.GPTQInputs = s.GPTQInputs; p.GPTQInputs != "" && s.Searches() {
			p.InputClipGrid = s.ActClipGrid
			if len(p.InputClipGrid) == 0 {
				p.InputClipGrid = quant.DefaultActClipGrid
			}
		}
	}
	if s.ScaleSign == "search" {
		p.ScaleSign = "search"
	}
	if s.Rotation == "hadamard" {
		p.Seed = rotationSeed(seedName)
		if s.RotationBlock > quant.MinBlock {
			p.RotationBlock = s.RotationBlock
		}
		if s.Method == "gptq" && s.RotationSearch > 1 {
			p.RotationSeeds, p.SearchVersion = s.RotationSearch, quant.SearchVersion
		}
	}
	if s.Importance == "imatrix" && s.Method == "rtn" {
		p.Importance = "imatrix"
	}
	if a := s.ActClip; !a.Search && a.Ratio > 0 && a.Ratio < 1 {
		p.ActClip = a.Ratio
	}
	return p
}

// planActClips sets the act-clip parameters of every weight whose scheme searches its activation clip,
// and the sample size of every finalize whose GPTQ sees quantized inputs, or says why it cannot: both
// run on the activation sample calibration keeps of the weight's input site, which exists for the block
// weights that are not per expert.
func (t *Target) planActClips(src *source, ws []*weight) error {
	var errs []string
	for _, w := range ws {
		s := t.r.SchemeFor(w.tensor)
		if s == nil || !s.SamplesInputs() {
			continue
		}
		acts, _, ok := stages.ActSampleOutput(src.shape, w.name)
		if !ok {
			if s.Searches() {
				errs = append(errs, fmt.Sprintf("%s: act_clip: search needs the activation sample of its input, which calibration keeps only for block weights that are not per expert; set a fixed act_clip for it", w.name))
			} else {
				errs = append(errs, fmt.Sprintf("%s: gptq_inputs %s needs the activation sample of its input, which calibration keeps only for block weights that are not per expert; use gptq_inputs: float for it", w.name, s.GPTQInputs))
			}
			continue
		}
		w.acts = acts
		c := t.r.Calibration
		for _, p := range []*stages.FinalizeParams{&w.fin, w.promote} {
			if p == nil || p.GPTQInputs == "" {
				continue
			}
			p.InputRows = c.ActSample
			if rows := stages.ActSampleRows(c.Sequences, c.Ctx, c.ActSample); rows < p.KP() {
				errs = append(errs, fmt.Sprintf("%s: gptq_inputs %s needs an activation sample of at least %d rows (its stored row length), calibration keeps %d (calibration.act_sample %d of %d x %d tokens); raise calibration.act_sample",
					w.name, p.GPTQInputs, p.KP(), rows, c.ActSample, c.Sequences, c.Ctx))
			}
		}
		if !s.Searches() {
			continue
		}
		grid := s.ActClipGrid
		if len(grid) == 0 {
			grid = quant.DefaultActClipGrid
		}
		clip := func(p *stages.FinalizeParams) *stages.ActClipParams {
			return &stages.ActClipParams{Tensor: w.tensor, N: p.N, K: p.K, KP: p.KP(), ActBits: p.ActBits, Grid: grid,
				Channels: stages.DefaultActClipChannels, Rows: t.r.Calibration.ActSample}
		}
		w.acts, w.clip = acts, clip(&w.fin)
		if w.promote != nil {
			w.pclip = clip(w.promote)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrPlan, strings.Join(errs, "; "))
	}
	return nil
}

// notMatmul says why a block tensor is not a matrix a block multiplies its activations by (a
// convolution kernel such as ssm_conv1d or shortconv.conv: no input site of the block lists it), or ""
// when it is one or lies outside the blocks (output.weight).
func notMatmul(shape stages.ModelShape, tensor string, experts int) string {
	if !strings.HasPrefix(tensor, "blk.") {
		return ""
	}
	name := tensor
	if experts > 0 {
		name = pack.ExpertName(tensor, 0)
	}
	c := shape.Config()
	if _, _, _, ok := c.SiteOf(name); !ok {
		return "which is not a matmul weight of its block (no input site of the model reads it: a convolution kernel, or a tensor of another architecture)"
	}
	return ""
}

// inNextN reports whether tensor belongs to one of the model's multi-token-prediction blocks
// (blk.N with N in [Layers, Layers+NextN)): it stays in the stub as stored and is never packed,
// whatever the schemes match (llama.cpp runs those blocks only to draft tokens for speculative
// decoding, and no stage here runs them).
func inNextN(shape stages.ModelShape, tensor string) bool {
	l := blockOf(tensor)
	return shape.NextN > 0 && l >= shape.Layers && l < shape.Layers+shape.NextN
}

// nextNReport is what the report says of the source's multi-token-prediction blocks (nil when it
// has none).
func nextNReport(src *source) *stages.ReportNextN {
	if src.shape.NextN == 0 {
		return nil
	}
	n := &stages.ReportNextN{}
	for l := src.shape.Layers; l < src.shape.Layers+src.shape.NextN; l++ {
		n.Blocks = append(n.Blocks, l)
	}
	for _, ti := range src.tensors {
		if inNextN(src.shape, ti.Name) {
			n.Tensors++
			n.Bytes += ti.Size
		}
	}
	return n
}

// isExpertTensor reports whether name is an MoE expert tensor (llama.cpp's blk.N.ffn_*_exps.weight).
func isExpertTensor(name string) bool {
	return strings.HasPrefix(name, "blk.") && (strings.HasSuffix(name, ".ffn_gate_exps.weight") ||
		strings.HasSuffix(name, ".ffn_up_exps.weight") || strings.HasSuffix(name, ".ffn_down_exps.weight"))
}

// isRouter reports whether name is an MoE router (blk.N.ffn_gate_inp.weight): it stays float in the
// stub and is never packed, whatever the schemes match.
func isRouter(name string) bool {
	return strings.HasPrefix(name, "blk.") && strings.HasSuffix(name, ".ffn_gate_inp.weight")
}

// hessianOutput returns the calibrate output holding the Hessian of w's input ("" when calibration
// captures none for it).
func (w *weight) hessianOutput(shape stages.ModelShape) string {
	name, _, _ := stages.HessianOutput(shape, w.name)
	return name
}

// selectWeights applies the schemes to the source's tensors, in file order.
func (t *Target) selectWeights(src *source) ([]*weight, error) {
	r := t.r
	matched := make([]int, len(r.Schemes))
	nextn := make([]int, len(r.Schemes)) // matches of multi-token-prediction blocks' tensors
	var ws []*weight
	var errs []string
	for _, ti := range src.tensors {
		if len(ti.Shape) < 2 || ti.Name == "token_embd.weight" || isRouter(ti.Name) {
			continue
		}
		if inNextN(src.shape, ti.Name) {
			for i := range r.Schemes {
				if r.Schemes[i].Matches(ti.Name) {
					nextn[i]++
				}
			}
			continue
		}
		for i := range r.Schemes {
			if r.Schemes[i].Matches(ti.Name) {
				matched[i]++
			}
		}
		s := r.SchemeFor(ti.Name)
		if s == nil {
			continue
		}
		experts := 0
		switch {
		case len(ti.Shape) == 3 && isExpertTensor(ti.Name) && ti.Shape[2] >= 1:
			experts = int(ti.Shape[2])
		case len(ti.Shape) != 2:
			errs = append(errs, fmt.Sprintf("%s has shape %v: only 2-D weights and MoE expert tensors (blk.N.ffn_{gate,up,down}_exps.weight, 3-D) are packed", ti.Name, ti.Shape))
			continue
		}
		if why := notMatmul(src.shape, ti.Name, experts); why != "" {
			errs = append(errs, fmt.Sprintf("a scheme (match %q) matches %s, %s: it stays in the stub as stored; narrow the match", s.Match, ti.Name, why))
			continue
		}
		n, k := int(ti.Shape[1]), int(ti.Shape[0])
		mats := []int{-1}
		if experts > 0 {
			mats = mats[:0]
			for e := range experts {
				mats = append(mats, e)
			}
		}
		for _, e := range mats {
			w, err := t.planWeight(src.shape, s, ti.Name, e, max(experts, 1), n, k)
			if err != "" {
				errs = append(errs, err)
				break
			}
			ws = append(ws, w)
		}
	}
	what := "the model"
	if r.Source.Model != "" {
		what = r.Source.Model
	}
	for i, c := range matched {
		switch {
		case c == 0 && nextn[i] > 0:
			errs = append(errs, fmt.Sprintf("schemes[%d] (match %q) matches only tensors of %s's multi-token-prediction blocks (blk.%d on), which are never packed: nothing runs them to calibrate or screen, and they stay in the stub as stored",
				i, r.Schemes[i].Match, what, src.shape.Layers))
		case c == 0:
			errs = append(errs, fmt.Sprintf("schemes[%d] (match %q) matches no weight of %s (a typo?)", i, r.Schemes[i].Match, what))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrPlan, strings.Join(errs, "; "))
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("%w: no weight of %s matches any scheme", ErrPlan, what)
	}
	return ws, nil
}

// blockOf returns the block (layer) number of a tensor named "blk.<n>.…", or -1. The number is
// read as model.Config.SiteOf reads it (decimal, no sign or leading zero), else as fmt.Sscanf's %d
// does: the layer stages.HessianOutput names for the weights calibration captures, without building
// the block's sites to find it (a 64-layer graph's planning allocated half a megabyte doing so).
func blockOf(tensor string) int {
	if rest, ok := strings.CutPrefix(tensor, "blk."); ok {
		if idx, _, ok := strings.Cut(rest, "."); ok {
			if l, err := strconv.Atoi(idx); err == nil && l >= 0 && strconv.Itoa(l) == idx {
				return l
			}
		}
	}
	l := -1
	if _, err := fmt.Sscanf(tensor, "blk.%d.", &l); err != nil {
		return -1
	}
	return l
}

// planWeight returns the weight of tensor (expert e, or -1 for a 2-D tensor) under scheme s, or
// the reason it cannot be planned.
func (t *Target) planWeight(shape stages.ModelShape, s *recipe.Scheme, tensor string, e, nmat, n, k int) (*weight, string) {
	name := tensor
	if e >= 0 {
		name = pack.ExpertName(tensor, e)
	}
	w := &weight{name: name, tensor: tensor, expert: e, nmat: nmat, layer: -1}
	fin := func(s *recipe.Scheme) stages.FinalizeParams {
		seedName := name
		if s.RotationSeed == "site" {
			seedName = siteSeedName(shape, name)
		}
		seedName = s.RotationSalt + seedName
		p := finalizeParams(s, name, seedName, n, k)
		p.Tensor = tensor
		if e >= 0 {
			p.Expert = &e
		}
		return p
	}
	w.fin = fin(s)
	if err := w.fin.CheckRotation(); err != nil { // the rotation every KP of the weight's nodes pads by
		return nil, fmt.Sprintf("%s: %v", name, err)
	}
	w.layer = blockOf(tensor)
	if w.fin.Method == "gptq" && w.hessianOutput(shape) == "" {
		if e >= 0 {
			return nil, fmt.Sprintf("%s: method gptq on an MoE expert slice needs that expert's Hessian, which calibration does not capture for %s; use rtn (optionally with importance: imatrix) for it", name, tensor)
		}
		return nil, fmt.Sprintf("%s: method gptq needs a Hessian, and calibration captures only the block weights (blk.N.attn_*/ffn_*); use rtn for it", tensor)
	}
	if p := t.r.Promote; p != nil && p.Matches(tensor) && p.To != s.DType && s.DType != "F16" {
		info := recipe.DTypes[p.To]
		ps := *s
		ps.DType, ps.ActBits, ps.Rotation = p.To, info.ActBits, info.Rotation
		if ps.Rotation == "" {
			ps.Rotation = "none"
		}
		if info.Bits == 8 {
			ps.Group = 0
			ps.ScaleSign, ps.ScaleSearch = "", "" // a symmetric code range; per channel: no group scales to search
		}
		if ps.Rotation == "hadamard" {
			ps.Importance = "" // the promoted tier is rotated: an imatrix cannot weight it
		}
		fp := fin(&ps)
		if err := fp.CheckRotation(); err != nil {
			return nil, fmt.Sprintf("%s: promote to %s: %v", name, p.To, err)
		}
		w.promote = &fp
	}
	return w, ""
}

// checkImatrix checks, before anything runs, that the recipe's imatrix has an entry of the right
// shape for every weight that binds it (finalize checks again when it reads the values).
func (t *Target) checkImatrix(ctx context.Context, ws []*weight) error {
	var need []*weight
	for _, w := range ws {
		if w.fin.Importance == "imatrix" || w.promote != nil && w.promote.Importance == "imatrix" {
			need = append(need, w)
		}
	}
	if len(need) == 0 {
		return nil
	}
	path := t.r.Imatrix
	if err := checkFile("imatrix", path); err != nil {
		return err
	}
	shapes, err := calib.ImatrixShapes(ctx, path)
	if err != nil {
		return fmt.Errorf("%w: imatrix: %w", ErrPlan, err)
	}
	var errs []string
	seen := map[string]bool{}
	for _, w := range need {
		if seen[w.tensor] {
			continue
		}
		seen[w.tensor] = true
		nMat := w.nmat
		s, ok := shapes[w.tensor]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("imatrix %s has no entry for %s (importance imatrix needs one; an imatrix of another model?)", path, w.tensor))
		case !s.Fits(w.fin.K, nMat):
			errs = append(errs, fmt.Sprintf("imatrix %s: entry %s has %s, weight %s needs K=%d x %d matrices", path, w.tensor, s, w.tensor, w.fin.K, nMat))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrPlan, strings.Join(errs, "; "))
	}
	return nil
}

// unreadHessians returns, for blocks [a, b), the captured sites (stages.HessianSites) whose Hessians no
// weight of ws reads: only GPTQ finalizes read one, so a site all of whose weights (every expert of an
// expert site) are packed by round-to-nearest is skipped (stages.CalibrateParams.Skip). nil when every
// site is read, so a recipe that GPTQs every weight plans the calibrate nodes it always did.
func unreadHessians(shape stages.ModelShape, ws []*weight) func(a, b int) []string {
	read := map[string]bool{}
	for _, w := range ws {
		if w.fin.Method == "gptq" {
			if site, ok := stages.HessianSite(shape, w.name); ok {
				read[site] = true
			}
		}
	}
	return func(a, b int) []string {
		var skip []string
		for _, site := range stages.HessianSites(shape, a, b) {
			if !read[site] {
				skip = append(skip, site)
			}
		}
		slices.Sort(skip)
		return skip
	}
}

// windowWeight is the weight as a propagate node emulates it: its finalized form's dtype and geometry.
func (w *weight) windowWeight() stages.WindowWeight {
	return stages.WindowWeight{Name: w.name, DType: w.fin.DType, KP: w.fin.KP(), Group: w.fin.Group, Block: w.fin.Emulated(w.name).Block}
}

// windowWeights returns, for blocks [a, b), the weights of ws a propagate node of that window emulates.
func windowWeights(ws []*weight) func(a, b int) []stages.WindowWeight {
	return func(a, b int) []stages.WindowWeight {
		var out []stages.WindowWeight
		for _, w := range ws {
			if w.layer >= a && w.layer < b {
				out = append(out, w.windowWeight())
			}
		}
		return out
	}
}

// windows returns the calibration windows [a, b) covering every layer. A fixed window.layers gives
// windows of that many layers (the last one shorter). window: auto sizes the first window as the
// most layers from block 0 whose nodes fit --mem, and every later window the same unless its own
// blocks need more (a hybrid model's blocks differ: lfm2moe's leading dense blocks weigh far less than
// its MoE ones, whose per-expert Hessians dominate): such a window is shortened until it fits. So
// a model whose blocks are alike gets windows of one size, and no window is ever refused while one
// layer of it fits.
func (t *Target) windows(shape stages.ModelShape, skip func(a, b int) []string, held func(a, b int) []stages.WindowWeight) ([][2]int, error) {
	c := t.r.Calibration
	mem := func(a, b int) int64 {
		cal := stages.CalibrateMemory(shape, a, b, c.Sequences, c.Ctx, skip(a, b)...)
		if c.ActSample > 0 { // some scheme searches its activation clip: every window keeps samples
			cal += stages.ActSampleMemory(shape, a, b, c.Sequences, c.Ctx, c.ActSample)
		}
		return max(cal, stages.PropagateMemory(shape, a, b, c.Sequences, c.Ctx, held(a, b)))
	}
	size := c.Window.Layers
	if c.Window.Auto {
		size = 1
		for size < shape.Layers && mem(0, size+1) <= t.mem {
			size++
		}
	}
	var ws [][2]int
	for a := 0; a < shape.Layers; {
		b := min(a+size, shape.Layers)
		for c.Window.Auto && b > a+1 && mem(a, b) > t.mem {
			b--
		}
		if m := mem(a, b); m > t.mem {
			if c.Window.Auto {
				return nil, fmt.Errorf("%w: calibration window [%d, %d) (one layer, %d sequences of %d) needs %s, more than --mem %s",
					ErrPlan, a, b, c.Sequences, c.Ctx, units.FormatSize(m), units.FormatSize(t.mem))
			}
			return nil, fmt.Errorf("%w: calibration window [%d, %d) needs %s, more than --mem %s (use a smaller calibration.window or window: auto)",
				ErrPlan, a, b, units.FormatSize(m), units.FormatSize(t.mem))
		}
		ws = append(ws, [2]int{a, b})
		a = b
	}
	return ws, nil
}

// checkWeightMemory refuses a plan with a weight node that alone needs more than --mem, naming the
// largest needs (at most overWeightsShown of them: a 27B model short of memory has hundreds), how many
// weights are over, and the --mem that would plan.
func (t *Target) checkWeightMemory(ws []*weight) error {
	type over struct {
		need int64
		what string
	}
	var errs []over
	for _, w := range ws {
		for _, p := range []*stages.ActClipParams{w.clip, w.pclip} {
			if p != nil {
				if m := stages.ActClipMemory(*p); m > t.mem {
					errs = append(errs, over{m, fmt.Sprintf("weight %s needs %s for its activation clip search (%d sample rows, %d channels)",
						w.name, units.FormatSize(m), p.Rows, p.Channels)})
				}
			}
		}
		for i, p := range []*stages.FinalizeParams{&w.fin, w.promote} {
			if p != nil {
				m := stages.FinalizeMemory(*p)
				if i == 0 && w.fused || i == 1 && w.pfused {
					m = stages.RTNTileMemory(*p)
				}
				if m > t.mem {
					errs = append(errs, over{m, fmt.Sprintf("weight %s (%s %s, %dx%d) needs %s to finalize",
						w.name, p.Method, p.DType, p.N, p.K, units.FormatSize(m))})
				}
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b over) int { return cmp.Compare(b.need, a.need) })
	var msgs []string
	for _, e := range errs[:min(len(errs), overWeightsShown)] {
		msgs = append(msgs, e.what)
	}
	if n := len(errs) - overWeightsShown; n > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more (the least of them %s)", n, units.FormatSize(errs[len(errs)-1].need)))
	}
	return fmt.Errorf("%w: %d weight nodes need more than --mem %s: %s; the plan needs --mem %s at least",
		ErrPlan, len(errs), units.FormatSize(t.mem), strings.Join(msgs, "; "), units.FormatSize(errs[0].need))
}

// overWeightsShown is how many of the weights over --mem a plan error names.
const overWeightsShown = 3

func checkFile(field, path string) error {
	st, err := statFile(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPlan, field, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s: %s is not a regular file", ErrPlan, field, path)
	}
	return nil
}

// boardInput returns the board parameter (a built-in name) or, for a profile file, "" and the file.
func (t *Target) boardInput() (string, *engine.Input, error) {
	if _, ok := board.Builtin(t.r.Board); ok {
		return t.r.Board, nil, nil
	}
	if err := checkFile("board", t.r.Board); err != nil {
		return "", nil, err
	}
	in := engine.File(t.r.Board)
	return "", &in, nil
}
