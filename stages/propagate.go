package stages

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"orkpipe/ork/calib"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// PropagateParams are the parameters of "propagate" (sequential calibration): run the window
// [Start, End) with its finalized weights, emulated as the board computes them, and write the
// hidden states at End for the next window. Weights lists the finalized weights of the window; each
// is bound as input "w.<name>". Block weights not listed stay float.
type PropagateParams struct {
	Shape     ModelShape     `json:"shape"`
	Start     int            `json:"start"`
	End       int            `json:"end"`
	Sequences int            `json:"sequences"`
	Ctx       int            `json:"ctx"`
	Weights   []WindowWeight `json:"weights"`
}

// WindowWeight is a finalized weight a propagate node emulates, with the geometry that says what it
// holds in memory and takes to emulate (PropagateMemory): its pack dtype name, its stored row length (K,
// or K padded by its rotation), its group (0: one scale a row) and its rotation's Hadamard block (0:
// none). The node checks them against the weight file's meta, so a declaration never rests on a
// geometry the file does not have.
type WindowWeight struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	KP    int    `json:"kp"`
	Group int    `json:"group"`
	Block int    `json:"block,omitempty"` // Hadamard rotation block; 0: not rotated
}

// heldBytes is what the emulation of the weight holds, n rows of k inputs: an F16 weight's values as
// float32; a weight of codes its codes (a byte a code, KP a row: ReadQWeight unpacks int4 codes),
// packed into panels of 16 rows for the integer matmul where it takes them (quant.PanelBytes), and
// its decoded scales (ReadQWeight's read buffers, ~100 KiB for one read at a time, are within
// PropagateMemory's 48 MiB for the process).
func (w WindowWeight) heldBytes(n, k int) int64 {
	if w.DType == "F16" {
		return 4 * int64(n) * int64(k)
	}
	return quant.PanelBytes(n, w.KP, w.Group) + 4<<10 // codes and scales, as panels or not; and the meta
}

// PropagateMemory is the declared peak memory of a propagate node: each weight of the window's blocks
// as held — a finalized weight of ws as its emulation holds it (WindowWeight.heldBytes; reading an F16
// one also holds its file and binary16 values until it is converted, and one of codes its codes while
// they are packed into panels, one weight at a time), any other
// as the source holds it (model.Config.WeightBytes: encoded, or float32; an MoE router as float32) —,
// the blocks' vectors, the hidden states in flight (calib.ActivationMemory: no Hessian is accumulated),
// the most scratch one Apply of a finalized weight's emulation takes (EmulationScratch on the
// calib.ChunkRows tokens every Apply of a chunk takes) and 48 MiB for the process.
func PropagateMemory(s ModelShape, start, end, nSeq, ctxLen int, ws []WindowWeight) int64 {
	c := s.Config()
	rows := calib.ChunkRows(&c, nSeq, ctxLen)
	var emu int64
	fin := make(map[string]WindowWeight, len(ws))
	for _, w := range ws {
		fin[w.Name] = w
	}
	var b, convert int64
	for l := start; l < end; l++ {
		b += calib.LayerVectorBytes(&c, l)
		for _, site := range c.Sites(l) {
			for _, m := range site.Weights {
				for e := range max(1, site.Experts) {
					name := site.Tensor(l, m)
					if site.Experts > 0 {
						name += "#" + strconv.Itoa(e)
					}
					switch w, ok := fin[name]; {
					case ok:
						b += w.heldBytes(m.N, site.Width)
						e := EmulatedEntry{DType: w.DType, N: m.N, KP: w.KP, Group: w.Group, Block: w.Block}
						emu = max(emu, EmulationScratch([]EmulatedEntry{e}, rows, rows))
						if w.DType == "F16" {
							convert = max(convert, 4*int64(m.N)*int64(site.Width))
						} else {
							convert = max(convert, int64(m.N)*int64(w.KP)) // the codes while packed into panels
						}
					case !calib.Captured(site): // the MoE router, float32
						b += 4 * int64(m.N) * int64(site.Width)
					default:
						b += c.WeightBytes(m.N, site.Width)
					}
				}
			}
		}
	}
	if emu == math.MaxInt64 {
		return emu
	}
	return b + convert + emu + calib.ActivationMemory(&c, nSeq, ctxLen) + 48<<20
}

// validate checks the weight's dtype (spelled as pack.DType.String spells it), row length, group and
// rotation block.
func (w WindowWeight) validate() error {
	d, err := pack.ParseDType(w.DType)
	switch {
	case err != nil:
		return err
	case d.String() != w.DType:
		return fmt.Errorf("dtype %q: write it %s", w.DType, d)
	case w.KP < 1:
		return fmt.Errorf("kp %d: want a stored row length of at least 1", w.KP)
	case w.Group < 0 || d == pack.F16 && w.Group != 0:
		return fmt.Errorf("group %d of a %s weight: want 0 (F16) or a group size", w.Group, d)
	case w.Block < 0 || w.Block > w.KP:
		return fmt.Errorf("block %d: want 0 (not rotated) or a Hadamard block of at most kp %d", w.Block, w.KP)
	}
	return nil
}

func init() {
	Register(Define("propagate", 4, func(p PropagateParams) (Spec, error) {
		if err := p.Shape.validate(); err != nil {
			return Spec{}, err
		}
		if p.Start < 0 || p.End <= p.Start || p.End >= p.Shape.Layers+1 || p.Sequences < 1 || p.Ctx < 2 {
			return Spec{}, fmt.Errorf("window [%d, %d) of %d layers: invalid", p.Start, p.End, p.Shape.Layers)
		}
		s := Spec{Inputs: []string{"model", windowInput(p.Start)}, Outputs: []string{"hidden"},
			PeakMemory: PropagateMemory(p.Shape, p.Start, p.End, p.Sequences, p.Ctx, p.Weights)}
		seen := make(map[string]bool, len(p.Weights))
		for _, w := range p.Weights {
			if l, ok := windowWeightLayer(p.Shape, w.Name); !ok || l < p.Start || l >= p.End {
				return Spec{}, fmt.Errorf("weight %q is not a block weight (or expert slice <tensor>#<e> of an MoE block) of window [%d, %d)", w.Name, p.Start, p.End)
			}
			if seen[w.Name] {
				return Spec{}, fmt.Errorf("weight %q is listed twice", w.Name)
			}
			seen[w.Name] = true
			if err := w.validate(); err != nil {
				return Spec{}, fmt.Errorf("weight %q: %w", w.Name, err)
			}
			s.Inputs = append(s.Inputs, "w."+w.Name)
		}
		return s, nil
	}, runPropagate))
}

// windowWeightLayer returns the layer of a finalized block weight: a block weight a pack may hold, or
// an expert slice "<expert tensor>#<e>" with e below its site's expert count.
func windowWeightLayer(s ModelShape, w string) (int, bool) {
	_, l, ok := HessianOutput(s, w)
	return l, ok
}

// emulatedSource serves the listed weights from finalized-weight files, emulated with the board's
// arithmetic, and everything else from the float model.
type emulatedSource struct {
	*model.GGUFSource
	files    map[string]string
	declared map[string]WindowWeight
}

func (s *emulatedSource) Linear(ctx context.Context, name string) (model.Linear, bool, error) {
	path, ok := s.files[name]
	if !ok {
		return s.GGUFSource.Linear(ctx, name)
	}
	q, err := ReadQWeight(path)
	if err != nil {
		return nil, false, err
	}
	if q.Meta.Name != name {
		return nil, false, fmt.Errorf("weight file %s holds %q, bound as %q", path, q.Meta.Name, name)
	}
	if d := s.declared[name]; q.Meta.DType != d.DType || q.Meta.KP != d.KP || q.Meta.Group != d.Group || q.Meta.Rotation.Block != d.Block {
		return nil, false, fmt.Errorf("%w: %s: weight %s is %s, %d values a row, group %d, rotation block %d; the node declared %s, %d, group %d, rotation block %d (its memory estimate rests on them)",
			ErrWeightFile, path, name, q.Meta.DType, q.Meta.KP, q.Meta.Group, q.Meta.Rotation.Block, d.DType, d.KP, d.Group, d.Block)
	}
	pw, err := q.PackWeight()
	if err != nil {
		return nil, false, err
	}
	e, err := model.NewEmulated(ctx, pw, q.Meta.K)
	if err != nil {
		return nil, false, err
	}
	return e, true, nil
}

func runPropagate(ctx context.Context, p PropagateParams, req Request) error {
	fm, _, gf, err := model.OpenGGUF(ctx, req.Inputs["model"].Path, 0)
	if err != nil {
		return err
	}
	defer gf.Close()
	if err := p.Shape.checkModel(req.Inputs["model"].Path, fm.Cfg); err != nil {
		return err
	}
	gs, ok := fm.Src.(*model.GGUFSource)
	if !ok {
		return fmt.Errorf("model %s: no GGUF weight source", req.Inputs["model"].Path)
	}
	// The weights not finalized stay encoded (PropagateMemory counts them so), mapped from the model file
	// (calib.Propagate releases each layer when its run ends).
	gs.KeepEncoded, gs.MapEncoded = true, true
	src := &emulatedSource{GGUFSource: gs, files: map[string]string{}, declared: map[string]WindowWeight{}}
	for _, w := range p.Weights {
		src.files[w.Name] = req.Inputs["w."+w.Name].Path
		src.declared[w.Name] = w
	}
	if err := checkPropagateScratch(p, fm.Cfg, src.files); err != nil {
		return err
	}
	m, err := model.NewModel(fm.Cfg, src)
	if err != nil {
		return err
	}
	in, done, err := windowSource(m, req, p.Start, p.Sequences, p.Ctx)
	if err != nil {
		return err
	}
	defer done()
	f, bw, hw, err := createHidden(req.Output("hidden"), m.Cfg.NEmbd, p.Ctx, p.Sequences, p.End)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := calib.Propagate(ctx, m, calib.Window{Start: p.Start, End: p.End}, in, hw); err != nil {
		return fmt.Errorf("propagating layers [%d, %d) through their quantized weights: %w", p.Start, p.End, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// checkPropagateScratch refuses, before any layer runs, a window with a weight file whose emulation on
// the tokens every Apply of a chunk takes (calib.ChunkRows) needs more scratch (model.EmulationBytes,
// from the file's own geometry) than the node declares in all (PropagateMemory), with a
// model.ErrOverBudget error naming the weight, its file, the tokens, its padded K and both figures:
// a file padded wider than the node declared would run past it, as the screen refuses such a pack entry.
func checkPropagateScratch(p PropagateParams, cfg model.Config, files map[string]string) error {
	declared := PropagateMemory(p.Shape, p.Start, p.End, p.Sequences, p.Ctx, p.Weights)
	rows := calib.ChunkRows(&cfg, p.Sequences, p.Ctx)
	for _, w := range p.Weights {
		path := files[w.Name]
		m, err := ReadQWeightMeta(path)
		if err != nil {
			return err
		}
		if m.DType == pack.F16.String() {
			continue
		}
		pm, err := m.PackMeta()
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrWeightFile, path, err)
		}
		need, ok := model.EmulationBytes(pm, rows, 0)
		if ok && need <= declared {
			continue
		}
		what := fmt.Sprintf("%d bytes", need)
		if !ok {
			what = "more bytes than an int64 counts"
		}
		return fmt.Errorf("propagate window [%d, %d): weight %s (%s): emulating it on %d tokens at once needs %s of scratch (the model's K = %d padded to KP = %d, rotation block %d), more than the node's declared peak memory (PropagateMemory) of %d bytes: %w",
			p.Start, p.End, w.Name, path, rows, what, m.K, m.KP, m.Rotation.Block, declared, model.ErrOverBudget)
	}
	return nil
}
