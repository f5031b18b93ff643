package stages

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"

	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// FinalizeParams are the parameters of "finalize": how one weight of the source model is quantized.
// They hold only what changes the codes, scales and qerr (never the tile layout), so changing the
// layout never re-runs GPTQ. Method gptq binds input "hessian" (the Hessian of the weight's input,
// from calibrate); rtn binds none, or "imatrix" with Importance. N and K are the weight's shape (for
// the memory estimate; checked against the model); an MoE expert slice (Expert) is rows
// [e·N, (e+1)·N) of a 3-D tensor (stages/finalize_slice.go).
type FinalizeParams struct {
	Tensor   string    `json:"tensor"`
	Method   string    `json:"method"` // gptq | rtn (| none for F16)
	DType    string    `json:"dtype"`
	Group    int       `json:"group"`
	Rotation string    `json:"rotation"` // none | hadamard
	ActBits  int       `json:"act_bits"`
	ClipGrid []float64 `json:"clip_grid"`
	Damp     float64   `json:"damp"`
	ActOrder bool      `json:"act_order"`
	Seed     uint64    `json:"seed"` // rotation sign seed
	N        int       `json:"n"`
	K        int       `json:"k"`
	// Expert, when set, makes the weight expert slice e of the MoE expert tensor Tensor
	// [K, N, n_expert]; the finalized weight is named "<Tensor>#<e>" (its pack entry).
	Expert *int `json:"expert,omitempty"`
	// Importance "imatrix" (rtn, no rotation) binds input "imatrix", a llama.cpp importance matrix,
	// and weights the clip search and qerr by its mean x² per input channel (quant.RTNImportance).
	Importance string `json:"importance,omitempty"`
	// ActClip is a fixed activation clip ratio in (0, 1) recorded with the weight (0, omitted: 1, no
	// clipping, or the act-clip node after finalize searches it).
	ActClip float64 `json:"act_clip,omitempty"`
	// ScaleSearch "gptq" (method gptq) scores each group's scale candidates by GPTQ's loss
	// (quant.ScaleSearchGPTQ); "" weights their error by diag(H) or the importance.
	ScaleSearch string `json:"scale_search,omitempty"`
	// ScaleSign "search" also tries negative scales for 4-bit codes (quant.WithNegativeScales).
	ScaleSign string `json:"scale_sign,omitempty"`
	// RotationBlock is the smallest Hadamard block of the rotation (0, omitted: quant.MinBlock;
	// quant.NewRotationMinBlock).
	RotationBlock int `json:"rotation_block,omitempty"`
	// RotationSeeds (gptq with hadamard only) is the number of rotation sign seeds scored by their RTN
	// weights' output error before the one GPTQ run, the plan's Seed first (quant.WithRotationSearch);
	// 0, omitted: the seed alone. SearchVersion is the scores' arithmetic, quant.SearchVersion,
	// required with RotationSeeds and only with it (the planner sets it): another arithmetic may
	// order two seeds the other way, so a node keyed with another version is refused, never run.
	RotationSeeds int `json:"rotation_seeds,omitempty"`
	SearchVersion int `json:"search_version,omitempty"`
	// GPTQInputs "quantized" or "asymmetric" (method gptq) binds input "acts", the activation sample
	// of the weight's input site from calibrate, and makes GPTQ see those inputs quantized to ActBits
	// (quant.WithQuantizedInputs): the clip is ActClip when set, else the ratio of InputClipGrid
	// (each rounded to float32) that least changes the float weight's output, else 1; the chosen clip
	// is recorded as the weight's activation clip (an act-clip node after finalize may search again).
	// InputRows is the sample's rows at most (for the memory estimate).
	GPTQInputs    string    `json:"gptq_inputs,omitempty"`
	InputClipGrid []float64 `json:"input_clip_grid,omitempty"`
	InputRows     int       `json:"input_rows,omitempty"`
	// ScaleRefit (method gptq, no act_order) is the rounds of quant.WithScaleRefit: each row's group
	// scales refitted to GPTQ's codes against the Hessian (0, omitted: off). RefitSteps is the
	// refit's conjugate-gradient steps a row, required with ScaleRefit and only with it (the planner
	// sets quant.DefaultRefitSteps): the steps change the scales of rows of more groups than steps,
	// so they are key material. RefitVersion is the refit's arithmetic, quant.RefitVersion, required
	// with ScaleRefit and only with it (the planner sets it): another arithmetic may round a scale
	// the other way, so a node keyed with another version is refused, never run as this one.
	ScaleRefit   int `json:"scale_refit,omitempty"`
	RefitSteps   int `json:"refit_steps,omitempty"`
	RefitVersion int `json:"refit_version,omitempty"`
}

// inputTarget returns the quant input target GPTQInputs names.
func (p FinalizeParams) inputTarget() (quant.InputTarget, error) {
	switch p.GPTQInputs {
	case "":
		return quant.InputsFloat, nil
	case "quantized":
		return quant.InputsQuantized, nil
	case "asymmetric":
		return quant.InputsAsymmetric, nil
	}
	return 0, fmt.Errorf("gptq_inputs %q: want quantized, asymmetric or nothing", p.GPTQInputs)
}

// inputClipGrid returns the clip ratios GPTQ's quantized inputs choose from, rounded to float32 (the
// precision a pack stores).
func (p FinalizeParams) inputClipGrid() []float64 {
	g := []float64{1}
	switch {
	case p.ActClip > 0:
		g = []float64{p.ActClip}
	case len(p.InputClipGrid) > 0:
		g = p.InputClipGrid
	}
	out := make([]float64, len(g))
	for i, c := range g {
		out[i] = float64(float32(c))
	}
	return out
}

// KP returns the stored row length of the finalized weight: K, or K padded by its rotation. p must
// have a rotation CheckRotation accepts, as every FinalizeParams Bind accepts has (validate checks
// it) and every one the build planner plans (it checks each weight's); KP panics with CheckRotation's
// error otherwise, rather than return a row length no finalize would write.
func (p FinalizeParams) KP() int {
	if r := p.mustRotation(); !r.IsZero() {
		return r.Padded
	}
	return p.K
}

// rotationBlock returns the Hadamard block of the rotation (0 when none), under KP's contract.
func (p FinalizeParams) rotationBlock() int {
	return p.mustRotation().Block
}

// CheckRotation returns nil when the weight has no rotation or its Hadamard rotation can be built
// (HadamardRotation), else the error, wrapping ErrBadParams and naming the tensor, k and
// rotation_block.
func (p FinalizeParams) CheckRotation() error {
	_, err := p.rotation()
	return err
}

// rotation returns the weight's rotation up to its signs: the zero Rotation when it has none
// (rotation other than hadamard; validate refuses all but none), CheckRotation's error when its
// Hadamard rotation cannot be built.
func (p FinalizeParams) rotation() (quant.Rotation, error) {
	if p.Rotation != "hadamard" {
		return quant.Rotation{}, nil
	}
	r, err := p.HadamardRotation()
	if err != nil {
		return quant.Rotation{}, fmt.Errorf("%w: tensor %s: rotation hadamard with k %d, rotation_block %d: %w", ErrBadParams, p.Tensor, p.K, p.RotationBlock, err)
	}
	return r, nil
}

// mustRotation is rotation for params CheckRotation accepts; it panics with the error on others.
func (p FinalizeParams) mustRotation() quant.Rotation {
	r, err := p.rotation()
	if err != nil {
		panic(fmt.Sprintf("stages: the stored row length of finalize parameters CheckRotation refuses: %v", err))
	}
	return r
}

// HadamardRotation returns the rotation, up to its signs and seed, finalize gives the weight when its
// rotation is "hadamard" (whatever p.Rotation says): K padded and blocked as quant.NewRotationMinBlock
// does with at least p.RotationBlock values a block (0: quant.MinBlock, quant.NewRotation's rotation).
// Its Padded is the K of the pack entry finalize writes and its Block the entry's Hadamard block.
func (p FinalizeParams) HadamardRotation() (quant.Rotation, error) {
	return quant.NewRotationMinBlock(p.K, true, 0, max(p.RotationBlock, quant.MinBlock))
}

// dtype returns the pack dtype the parameters name, spelled as pack.DType.String spells it (a node key
// holds one spelling of each dtype).
func (p FinalizeParams) dtype() (pack.DType, error) {
	d, err := pack.ParseDType(p.DType)
	if err != nil {
		return 0, err
	}
	if d.String() != p.DType {
		return 0, fmt.Errorf("dtype %q: write it %s", p.DType, d)
	}
	return d, nil
}

// PaddedK returns the stored row length of a weight of k inputs under rotation: k for none, k padded
// as quant.NewRotation pads it for hadamard; an error wrapping ErrBadParams and naming the field for
// k < 1 or another rotation.
func PaddedK(k int, rotation string) (int, error) {
	switch rotation {
	case "none":
		if k < 1 {
			return 0, fmt.Errorf("%w: k %d: want positive", ErrBadParams, k)
		}
		return k, nil
	case "hadamard":
		r, err := quant.NewRotation(k, true, 0)
		if err != nil {
			return 0, fmt.Errorf("%w: rotation hadamard with k %d: %w", ErrBadParams, k, err)
		}
		return r.Padded, nil
	}
	return 0, fmt.Errorf("%w: rotation %q: want none or hadamard", ErrBadParams, rotation)
}

// FinalizeMemory is the declared peak memory of a finalize node, in bytes: 64 MiB for the process
// share and file buffers; for gptq and F16 the float32 weight (N·K·4), alive to the end, what the
// method holds on top of it, and (gptq) a margin the size of the codes and scales; rtn streams the
// weight's rows and holds only its codes and scales whole.
//
//   - gptq: quant.GPTQMemory (the K x K float64 Hessian, read once into an exact K²·8 allocation by
//     calib.ReadHessianFileHuge (outside the Go heap, counted against its limit) and handed over with quant.WithConsumeHessian to become GPTQ's
//     factorization buffer; the rotated copy; codes; scales; working rows; BLAS), plus the Hessian
//     as read when rotation pads K (then both exist at once); with a rotation search,
//     quant.RotationSearchMemory (one seed's RTN trial at a time and the scorer's float32 Eᵀ and
//     panel); with scale_refit, quant.RefitMemory (the target's product with H,
//     N x KP float64, and per worker a block of rows' Gram matrices); with gptq_inputs, the
//     activation sample as read and quant.InputsMemory.
//   - rtn: the codes, the scales, and per worker a few rows (float32 as read and rotated, float64)
//     and the buffers of the source reader and hash.
//   - F16 (method none): the N·K·2 values and their encoding copy.
//
// For the 27B ffn_down (N = 5120, K = 17408, GPTQ, I4_ROT_A8, group 32, 2 cores) that is
// 0.06 + 0.33 (weight) + 2.95 (GPTQ: Hessian 2.26, rotated copy 0.33, rows 0.17, codes 0.09, ...)
// + 0.09 (margin) ≈ 3.44 GiB; TestFinalizeMemory measures it against the process's VmHWM.
func FinalizeMemory(p FinalizeParams) int64 {
	n, k, kp := int64(p.N), int64(p.K), int64(p.KP())
	base := int64(64<<20) + n*k*4 // float32 weight
	if d, _ := p.dtype(); d == pack.F16 {
		return base + 2*n*k*2
	}
	groups := int64(1)
	if p.Group > 0 {
		groups = (kp + int64(p.Group) - 1) / int64(p.Group)
	}
	encode := n*kp + n*groups*4 // the margin: the size of the codes and scales
	if p.Method == "gptq" {
		mem := base + quant.GPTQMemory(p.N, p.K, int(kp), p.Group, p.Rotation == "hadamard") + encode
		if kp != k {
			mem += k * k * 8
		}
		if p.RotationSeeds > 1 {
			mem += quant.RotationSearchMemory(p.N, p.K, int(kp), p.Group, p.rotationBlock())
		}
		mem += quant.RefitMemory(p.N, int(kp), p.Group, p.ScaleRefit)
		if p.GPTQInputs != "" { // the activation sample as read, and what GPTQ adds for it
			mem += 4*int64(p.InputRows)*k + quant.InputsMemory(p.N, p.K, int(kp), p.InputRows)
		}
		return mem
	}
	// rtn streams the rows (quant.RTNStream): codes and scales, and per worker a chunk of float32
	// rows as read (at least 1 MiB or one row) and rotated, a float64 row, the file reader's 1 MiB
	// buffer and a 4 MiB piece of the source hash; with an imatrix, its row as read (float32,
	// float64) and the means (float64)
	worker := max(1<<20, k*4) + max(1<<20, k*4)*kp/k + kp*8 + 1<<20 + 4<<20
	mem := int64(64<<20) + n*kp + n*groups*4 + worker*int64(runtime.GOMAXPROCS(0))
	if p.Importance == "imatrix" {
		mem += k * (4 + 8 + 8)
	}
	return mem
}

func (p FinalizeParams) validate() error {
	d, err := p.dtype()
	switch {
	case p.Tensor == "":
		return fmt.Errorf("tensor: empty")
	case err != nil:
		return err
	case d == pack.F16 && (p.Method != "none" || p.Group != 0 || p.Rotation != "none"):
		return fmt.Errorf("dtype F16: want method none, group 0, rotation none")
	case d != pack.F16 && p.Method != "gptq" && p.Method != "rtn":
		return fmt.Errorf("method %q: want gptq or rtn", p.Method)
	case p.Rotation != "none" && p.Rotation != "hadamard":
		return fmt.Errorf("rotation %q: want none or hadamard", p.Rotation)
	case !slices.Contains([]int{0, 32, 64, 128, 256, 512}, p.Group):
		return fmt.Errorf("group %d: want 0, 32, 64, 128, 256 or 512", p.Group)
	case p.N < 1 || p.K < 1:
		return fmt.Errorf("shape N=%d K=%d: want positive", p.N, p.K)
	case p.Expert != nil && *p.Expert < 0:
		return fmt.Errorf("expert %d: want >= 0", *p.Expert)
	case p.Importance != "" && p.Importance != "imatrix":
		return fmt.Errorf("importance %q: want imatrix or nothing", p.Importance)
	case p.Importance == "imatrix" && (p.Method != "rtn" || p.Rotation != "none"):
		return fmt.Errorf("importance imatrix with method %s, rotation %s: an imatrix holds only diag(H), it weights rtn without rotation", p.Method, p.Rotation)
	case p.RotationBlock != 0 && (p.Rotation != "hadamard" || p.RotationBlock <= quant.MinBlock || p.RotationBlock&(p.RotationBlock-1) != 0):
		return fmt.Errorf("rotation_block %d with rotation %s: want a power of two above %d with hadamard, or 0", p.RotationBlock, p.Rotation, quant.MinBlock)
	case p.RotationSeeds != 0 && (p.Method != "gptq" || p.Rotation != "hadamard" || p.RotationSeeds < 2 || p.RotationSeeds > quant.MaxRotationSearch):
		return fmt.Errorf("rotation_seeds %d with method %s, rotation %s: want 2..%d seeds with gptq and hadamard, or 0", p.RotationSeeds, p.Method, p.Rotation, quant.MaxRotationSearch)
	case p.RotationSeeds > 1 && p.SearchVersion != quant.SearchVersion || p.RotationSeeds == 0 && p.SearchVersion != 0:
		return fmt.Errorf("search_version %d with rotation_seeds %d: this binary scores seeds with version %d (0 without rotation_seeds)", p.SearchVersion, p.RotationSeeds, quant.SearchVersion)
	case p.ScaleRefit != 0 && (p.Method != "gptq" || p.ActOrder || p.ScaleRefit < 0 || p.ScaleRefit > quant.MaxScaleRefit):
		return fmt.Errorf("scale_refit %d with method %s, act_order %v: want 1..%d rounds with gptq without act_order, or 0", p.ScaleRefit, p.Method, p.ActOrder, quant.MaxScaleRefit)
	case p.ScaleRefit > 0 && (p.RefitSteps < 1 || p.RefitSteps > quant.MaxRefitSteps) || p.ScaleRefit == 0 && p.RefitSteps != 0:
		return fmt.Errorf("refit_steps %d with scale_refit %d: want 1..%d steps with scale_refit, 0 without", p.RefitSteps, p.ScaleRefit, quant.MaxRefitSteps)
	case p.ScaleRefit > 0 && p.RefitVersion != quant.RefitVersion || p.ScaleRefit == 0 && p.RefitVersion != 0:
		return fmt.Errorf("refit_version %d with scale_refit %d: this binary refits with version %d (0 without scale_refit)", p.RefitVersion, p.ScaleRefit, quant.RefitVersion)
	case !(p.ActClip >= 0 && p.ActClip < 1) || d == pack.F16 && p.ActClip != 0:
		return fmt.Errorf("act_clip %v: want a ratio in (0, 1), or 0 for none (F16: none)", p.ActClip)
	}
	if err := p.CheckRotation(); err != nil { // what KP and FinalizeMemory rely on
		return err
	}
	if _, err := p.inputTarget(); err != nil {
		return err
	}
	switch {
	case p.GPTQInputs == "" && (len(p.InputClipGrid) > 0 || p.InputRows != 0):
		return fmt.Errorf("input_clip_grid, input_rows: set without gptq_inputs")
	case p.GPTQInputs != "" && (p.Method != "gptq" || p.ActOrder || p.ActBits != 4 && p.ActBits != 8 || p.InputRows < 1):
		return fmt.Errorf("gptq_inputs %s with method %s, act_order %v, act_bits %d, input_rows %d: want gptq without act_order, 4- or 8-bit activations and a sample of at least one row",
			p.GPTQInputs, p.Method, p.ActOrder, p.ActBits, p.InputRows)
	}
	for _, c := range p.InputClipGrid {
		if !(c > 0 && c <= 1) {
			return fmt.Errorf("input_clip_grid ratio %v: want 0 < ratio <= 1", c)
		}
	}
	_, err = p.scaleOptions()
	return err
}

// scaleOptions returns the quant options of ScaleSearch and ScaleSign, or an error naming a value
// or combination quant does not accept.
func (p FinalizeParams) scaleOptions() ([]quant.Option, error) {
	var opts []quant.Option
	switch p.ScaleSearch {
	case "":
	case "gptq":
		if p.Method != "gptq" || p.Group == 0 || p.ActOrder {
			return nil, fmt.Errorf("scale_search gptq with method %s, group %d, act_order %v: want method gptq, a group size and no act_order", p.Method, p.Group, p.ActOrder)
		}
		opts = append(opts, quant.WithScaleSearch(quant.ScaleSearchGPTQ))
	default:
		return nil, fmt.Errorf("scale_search %q: want gptq or nothing", p.ScaleSearch)
	}
	switch p.ScaleSign {
	case "":
	case "search":
		if d, err := p.dtype(); err != nil || d.Bits() != 4 {
			return nil, fmt.Errorf("scale_sign search with dtype %s: want a 4-bit dtype", p.DType)
		}
		opts = append(opts, quant.WithNegativeScales(true))
	default:
		return nil, fmt.Errorf("scale_sign %q: want search or nothing", p.ScaleSign)
	}
	return opts, nil
}

func init() {
	Register(Define("finalize", 6, func(p FinalizeParams) (Spec, error) {
		if err := p.validate(); err != nil {
			return Spec{}, err
		}
		s := Spec{Inputs: []string{"model"}, Outputs: []string{"weight"}, PeakMemory: FinalizeMemory(p)}
		if p.Method == "gptq" {
			s.Inputs = append(s.Inputs, "hessian")
		}
		if p.Importance == "imatrix" {
			s.Inputs = append(s.Inputs, "imatrix")
		}
		if p.GPTQInputs != "" {
			s.Inputs = append(s.Inputs, "acts")
		}
		return s, nil
	}, runFinalize))
}

func runFinalize(ctx context.Context, p FinalizeParams, req Request) error {
	q, err := finalizeWeight(ctx, p, req, nil)
	if err != nil {
		return err
	}
	return WriteQWeight(req.Output("weight"), q)
}

// finalizeWeight quantizes the weight p names (its inputs in req) and returns it in memory: the
// codes and scales (or the F16 values) with their meta. With sinkFor, an RTN weight's codes go to
// the sink sinkFor returns for its meta (KP set, the quantization's results not yet) as they are
// made, and the returned weight has no codes.
func finalizeWeight(ctx context.Context, p FinalizeParams, req Request, sinkFor func(QWeightMeta) (quant.CodeSink, error)) (*QWeight, error) {
	f, err := gguf.Open(ctx, req.Inputs["model"].Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// RTN streams the rows (quant.RTNStream); F16 and GPTQ take the matrix whole.
	open := readFinalizeSource
	if p.Method == "rtn" {
		open = openFinalizeSource
	}
	fs, err := open(ctx, f, p.Tensor, p.Expert, p.N, p.K)
	if err != nil {
		return nil, err
	}
	m := fs.M
	dt, err := p.dtype()
	if err != nil {
		return nil, err
	}
	meta := QWeightMeta{Name: fs.Entry, DType: p.DType, Method: p.Method, N: p.N, K: p.K, KP: p.K, Bits: dt.Bits(),
		Group: p.Group, ActBits: p.ActBits, ActClip: float32(p.ActClip), Source: fs.Digest.String()}
	if meta.Bits == 16 {
		q := &QWeight{Meta: meta, F16: make([]uint16, len(m.Data))}
		var num, den float64
		for i, v := range m.Data {
			q.F16[i] = gguf.F32ToF16(v)
			if q.F16[i]&0x7c00 == 0x7c00 { // exponent all ones: ±Inf or NaN, the source's or by overflow
				return nil, fmt.Errorf("%s: value %v at row %d col %d: dtype F16 holds finite values up to ±65504: %w",
					fs.Entry, v, i/m.Cols, i%m.Cols, quant.ErrNotFinite)
			}
			d := float64(gguf.F16ToF32(q.F16[i]) - v)
			num += d * d
			den += float64(v) * float64(v)
		}
		if den > 0 {
			q.Meta.QErr = math.Sqrt(num / den)
		}
		return q, nil
	}
	grid := p.ClipGrid
	if len(grid) == 0 {
		grid = quant.DefaultClipGrid
	}
	opts := []quant.Option{quant.WithBits(meta.Bits), quant.WithGroup(p.Group), quant.WithClipGrid(grid)}
	if p.Rotation == "hadamard" {
		opts = append(opts, quant.WithRotation(true, p.Seed))
		if p.RotationBlock > 0 {
			opts = append(opts, quant.WithRotationMinBlock(p.RotationBlock))
		}
	}
	scaleOpts, err := p.scaleOptions()
	if err != nil {
		return nil, err
	}
	opts = append(opts, scaleOpts...)
	var w *quant.Weight
	if p.Method == "gptq" {
		ch, free, err := calib.ReadHessianFileHuge(ctx, req.Inputs["hessian"].Path)
		if err != nil {
			return nil, err
		}
		defer free() // GPTQ's factorization buffer (WithConsumeHessian) until it returns
		if ch.K != p.K {
			//lint:ignore ST1005 Hessian is a name (the GPTQ papers' H), capitalized in every message
			return nil, fmt.Errorf("Hessian %s is %dx%d, weight %s has K = %d", req.Inputs["hessian"].Path, ch.K, ch.K, fs.Entry, p.K)
		}
		if ch.Tokens == 0 {
			//lint:ignore ST1005 Hessian is a name (the GPTQ papers' H), capitalized in every message
			return nil, fmt.Errorf("Hessian %s: %s received no calibration tokens (Tokens = 0): GPTQ needs a Hessian; use method rtn for it or calibrate on more sequences",
				req.Inputs["hessian"].Path, fs.Entry)
		}
		qh := quant.Hessian(*ch)
		damp := p.Damp
		if damp == 0 {
			damp = 0.01
		}
		opts = append(opts, quant.WithDamping(damp, 0.01, 8), quant.WithActOrder(p.ActOrder), quant.WithConsumeHessian())
		if p.ActOrder && p.Group > 0 {
			opts = append(opts, quant.WithStaticGroups(true))
		}
		if p.RotationSeeds > 1 {
			opts = append(opts, quant.WithRotationSearch(p.RotationSeeds))
		}
		if p.ScaleRefit > 0 {
			opts = append(opts, quant.WithScaleRefit(p.ScaleRefit, p.RefitSteps))
		}
		if p.GPTQInputs != "" {
			o, err := finalizeInputs(ctx, p, req, fs.Entry)
			if err != nil {
				return nil, err
			}
			opts = append(opts, o)
		}
		w, err = quant.GPTQ(ctx, m, &qh, opts...)
		if err != nil {
			return nil, err
		}
	} else {
		var imp []float64
		if p.Importance == "imatrix" {
			if imp, err = imatrixImportance(ctx, req.Inputs["imatrix"].Path, p.Tensor, fs); err != nil {
				return nil, err
			}
		}
		if sinkFor == nil {
			w, err = quant.RTNStream(ctx, fs.Entry, p.N, p.K, fs, imp, opts...)
		} else {
			m := meta
			m.KP = p.KP()
			var sink quant.CodeSink
			if sink, err = sinkFor(m); err != nil {
				return nil, err
			}
			w, err = quant.RTNStreamTo(ctx, fs.Entry, p.N, p.K, fs, imp, sink, opts...)
		}
		if err != nil {
			return nil, err
		}
	}
	meta.KP, meta.Rotation, meta.QErr = w.KP, w.Rotation, w.QErr
	if w.InputClip > 0 && w.InputClip < 1 {
		meta.ActClip = float32(w.InputClip)
	}
	return &QWeight{Meta: meta, Codes: w.Codes, Scales: w.Scales}, nil
}

// finalizeInputs reads the activation sample (input "acts") of a weight whose GPTQ sees quantized
// inputs and returns the quant option.
func finalizeInputs(ctx context.Context, p FinalizeParams, req Request, entry string) (quant.Option, error) {
	target, err := p.inputTarget()
	if err != nil {
		return nil, err
	}
	acts, err := calib.ReadActSampleFile(ctx, req.Inputs["acts"].Path)
	if err != nil {
		return nil, err
	}
	if kp := p.KP(); acts.Rows < kp {
		return nil, fmt.Errorf("activation sample %s: %d rows, weight %s stores rows of %d values: GPTQ on quantized inputs needs at least that many sample rows (raise calibration.act_sample)",
			req.Inputs["acts"].Path, acts.Rows, entry, kp)
	}
	if acts.K != p.K || acts.Rows > p.InputRows || acts.Rows < 1 {
		return nil, fmt.Errorf("activation sample %s: %d rows of %d values, weight %s reads %d values (1 to %d rows planned)",
			req.Inputs["acts"].Path, acts.Rows, acts.K, entry, p.K, p.InputRows)
	}
	return quant.WithQuantizedInputs(target, acts.Data, acts.Rows, p.ActBits, p.inputClipGrid()), nil
}
