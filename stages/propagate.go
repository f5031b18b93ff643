package stages

import (
	"context"
	"fmt"

	"orkpipe/ork/calib"
	"orkpipe/ork/model"
)

// PropagateParams are the parameters of "propagate" (sequential calibration): run the window
// [Start, End) with its finalized weights, emulated as the board computes them, and write the
// hidden states at End for the next window. Weights lists the finalized weights of the window; each
// is bound as input "w.<name>". Block weights not listed stay float.
type PropagateParams struct {
	Shape     ModelShape `json:"shape"`
	Start     int        `json:"start"`
	End       int        `json:"end"`
	Sequences int        `json:"sequences"`
	Ctx       int        `json:"ctx"`
	Weights   []string   `json:"weights"`
}

// PropagateMemory is the declared peak memory of a propagate node: the window's source weights as held
// (model.Config.WeightBytes: encoded, or float32; with an MoE router as float32 and every expert slice),
// their emulated codes, the norms, the hidden states in flight (calib.EstimateMemory's without the
// Hessians' row batches: no Hessian is accumulated), and the dequantization scratch of one Apply of an
// encoded weight.
func PropagateMemory(s ModelShape, start, end, nSeq, ctxLen int) int64 {
	c := s.Config()
	var b int64
	for l := start; l < end; l++ {
		b += calib.LayerWeightBytes(&c, l) + 5*packableValues(&c, l)
	}
	return b + calib.ActivationMemory(&c, nSeq, ctxLen) + 48<<20
}

// packableValues is the number of values of block l's weights a pack may hold (every site weight but
// the MoE router's, every expert slice): their emulated codes take up to 5 bytes a value.
func packableValues(c *model.Config, l int) int64 {
	var n int64
	for _, s := range c.Sites(l) {
		if calib.Captured(s) {
			for _, m := range s.Weights {
				n += int64(m.N) * int64(s.Width) * int64(max(1, s.Experts))
			}
		}
	}
	return n
}

func init() {
	Register(Define("propagate", 3, func(p PropagateParams) (Spec, error) {
		if err := p.Shape.validate(); err != nil {
			return Spec{}, err
		}
		if p.Start < 0 || p.End <= p.Start || p.End >= p.Shape.Layers+1 || p.Sequences < 1 || p.Ctx < 2 {
			return Spec{}, fmt.Errorf("window [%d, %d) of %d layers: invalid", p.Start, p.End, p.Shape.Layers)
		}
		s := Spec{Inputs: []string{"model", windowInput(p.Start)}, Outputs: []string{"hidden"},
			PeakMemory: PropagateMemory(p.Shape, p.Start, p.End, p.Sequences, p.Ctx)}
		for _, w := range p.Weights {
			if l, ok := windowWeightLayer(p.Shape, w); !ok || l < p.Start || l >= p.End {
				return Spec{}, fmt.Errorf("weight %q is not a block weight (or expert slice <tensor>#<e> of an MoE block) of window [%d, %d)", w, p.Start, p.End)
			}
			s.Inputs = append(s.Inputs, "w."+w)
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
	files map[string]string
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
	pw, err := q.PackWeight()
	if err != nil {
		return nil, false, err
	}
	e, err := model.NewEmulated(pw, q.Meta.K)
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
	src := &emulatedSource{GGUFSource: gs, files: map[string]string{}}
	for _, w := range p.Weights {
		src.files[w] = req.Inputs["w."+w].Path
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
