package stages

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"

	"orkpipe/ork/calib"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// HessianOutput returns the calibrate output holding the Hessian GPTQ uses for a block weight or an
// expert slice of one ("<tensor>#<e>") of a model of shape s, and the weight's layer: "h.<l>.<site>" for
// the site the weight reads (model.Config.Sites: weights reading the same input share it, e.g.
// "blk.3.ffn_up.weight" -> "h.3.ffn_gate_up"), "h.<l>.<site>.<e>" for expert e of an expert site
// ("blk.3.ffn_up_exps.weight#2" -> "h.3.ffn_gate_up_exps.2"). ok is false for a tensor no captured site
// lists (outside the blocks, the MoE router) and for a whole expert tensor.
func HessianOutput(s ModelShape, tensor string) (name string, layer int, ok bool) {
	c := s.Config()
	l, in, _, ok := c.SiteOf(tensor)
	if !ok {
		return "", 0, false
	}
	site := c.Sites(l)[in]
	if !calib.Captured(site) {
		return "", 0, false
	}
	if site.Experts == 0 {
		return siteOutput(l, site), l, true
	}
	_, e, _ := pack.SplitExpert(tensor)
	return expertOutput(l, site, e), l, true
}

func siteOutput(l int, s model.Site) string { return "h." + strconv.Itoa(l) + "." + s.Name }

func expertOutput(l int, s model.Site, e int) string { return siteOutput(l, s) + "." + strconv.Itoa(e) }

// CalibrateParams are the parameters of "calibrate": one layer window [Start, End) over Sequences
// sequences of Ctx tokens. Window 0 reads "tokens"; later windows read "hidden" (the states at
// Start). With Hidden, the float hidden states at End are written too (one-shot mode; sequential
// mode gets them from "propagate" through the quantized window instead). The outputs are the Hessians
// of every captured site of each block l not in Skip (calibrateOutputs, HessianOutput): "h.<l>.<site>", e.g.
// "h.<l>.attn_qkv", "h.<l>.attn_output", "h.<l>.ffn_gate_up", "h.<l>.ffn_down" for a llama block, and
// "h.<l>.<site>.<e>" per expert e of an expert site ("h.<l>.ffn_gate_up_exps.<e>"), written even when
// no token reached the expert (Tokens = 0). An MoE model's window also writes
// "routing" (RoutingOutput): how its MoE blocks routed the calibration tokens.
type CalibrateParams struct {
	Shape     ModelShape `json:"shape"`
	Start     int        `json:"start"`
	End       int        `json:"end"`
	Sequences int        `json:"sequences"`
	Ctx       int        `json:"ctx"`
	Hidden    bool       `json:"hidden"`
	// ActSample > 0 also writes, per sampled input site of each block, a deterministic sample of at most
	// ActSample of its activation rows, "a.<l>.<site>" (ActSampleOutput; calib.ActSampler), for act-clip
	// and for finalize with gptq_inputs.
	ActSample int `json:"act_sample,omitempty"`
	// Skip names captured sites of the window, "h.<l>.<site>" (HessianSites), whose Hessians are
	// neither accumulated nor written (calib.Window.Skip): no weight of the build reads them, as when
	// an MoE model's experts are packed by round-to-nearest and calibration runs for the routing
	// statistics and the other sites. An expert site is skipped whole (none of its "h.<l>.<site>.<e>").
	// Sorted; empty (the default) captures every site.
	Skip []string `json:"skip,omitempty"`
}

// CalibrateMemory is the declared peak memory of a calibrate node: calib.EstimateMemory (the weights
// counted as the stage holds them: in their source encoding, s.WeightType), plus 1/64 of it (1.6 %) as
// a margin for what it does not count (the Go runtime's own overhead, garbage not yet collected), plus
// the process's fixed overhead (48 MiB). TestCalibrateMemory measures a node's peak RSS against it.
// skip are the sites the node does not capture (CalibrateParams.Skip). When one of them is not a
// captured site of the window the estimate skips none (an over-declaration; the stage refuses such a
// node before it runs).
func CalibrateMemory(s ModelShape, start, end, nSeq, ctxLen int, skip ...string) int64 {
	c := s.Config()
	refs, _ := skipRefs(&c, start, end, skip)
	est := calib.EstimateMemory(&c, calib.Window{Start: start, End: end, Skip: refs}, nSeq, ctxLen)
	return est + est/64 + 48<<20
}

// HessianSites returns the names of the captured sites of blocks [start, end), "h.<l>.<site>" in
// block and site order: what CalibrateParams.Skip may name. s must be valid.
func HessianSites(s ModelShape, start, end int) []string {
	c := s.Config()
	var out []string
	for l := start; l < end; l++ {
		for _, site := range c.Sites(l) {
			if calib.Captured(site) {
				out = append(out, siteOutput(l, site))
			}
		}
	}
	return out
}

// HessianSite returns the name of the captured site ("h.<l>.<site>", HessianSites) whose Hessian a
// finalize of tensor (an expert slice "<name>#<e>" included) reads, or false when calibration captures
// none for it.
func HessianSite(s ModelShape, tensor string) (string, bool) {
	c := s.Config()
	l, in, _, ok := c.SiteOf(tensor)
	if !ok || !calib.Captured(c.Sites(l)[in]) {
		return "", false
	}
	return siteOutput(l, c.Sites(l)[in]), true
}

// skipRefs resolves skip (site names of HessianSites) to the window's calib.SiteRefs, or an error naming
// the first name that is not a captured site of blocks [start, end).
func skipRefs(c *model.Config, start, end int, skip []string) ([]calib.SiteRef, error) {
	if len(skip) == 0 {
		return nil, nil
	}
	want := map[string]bool{}
	for _, n := range skip {
		want[n] = true
	}
	var refs []calib.SiteRef
	for l := start; l < end; l++ {
		for i, site := range c.Sites(l) {
			if n := siteOutput(l, site); want[n] && calib.Captured(site) {
				refs = append(refs, calib.SiteRef{Layer: l, Input: model.Input(i)})
				delete(want, n)
			}
		}
	}
	for _, n := range skip {
		if want[n] {
			return nil, fmt.Errorf("skip %q: not a captured site of blocks [%d, %d) (want one of HessianSites' h.<l>.<site>)", n, start, end)
		}
	}
	return refs, nil
}

func init() {
	Register(Define("calibrate", 7, func(p CalibrateParams) (Spec, error) {
		if err := p.Shape.validate(); err != nil {
			return Spec{}, err
		}
		if p.Start < 0 || p.End <= p.Start || p.End > p.Shape.Layers || p.Sequences < 1 || p.Ctx < 2 {
			return Spec{}, fmt.Errorf("window [%d, %d) of %d layers, %d sequences of %d: invalid", p.Start, p.End, p.Shape.Layers, p.Sequences, p.Ctx)
		}
		c := p.Shape.Config()
		if !slices.IsSorted(p.Skip) || len(slices.Compact(slices.Clone(p.Skip))) != len(p.Skip) {
			return Spec{}, fmt.Errorf("skip %v: want sorted site names, each once", p.Skip)
		}
		if _, err := skipRefs(&c, p.Start, p.End, p.Skip); err != nil {
			return Spec{}, err
		}
		s := Spec{Inputs: []string{"model", windowInput(p.Start)}, PeakMemory: CalibrateMemory(p.Shape, p.Start, p.End, p.Sequences, p.Ctx, p.Skip...)}
		for l := p.Start; l < p.End; l++ {
			s.Outputs = append(s.Outputs, calibrateOutputs(p.Shape, l, p.Skip)...)
		}
		if p.ActSample < 0 {
			return Spec{}, fmt.Errorf("act_sample %d: want 0 (none) or a number of rows", p.ActSample)
		}
		if p.ActSample > 0 {
			s.PeakMemory += ActSampleMemory(p.Shape, p.Start, p.End, p.Sequences, p.Ctx, p.ActSample)
			for l := p.Start; l < p.End; l++ {
				s.Outputs = append(s.Outputs, actSampleOutputs(p.Shape, l)...)
			}
		}
		if p.Hidden {
			s.Outputs = append(s.Outputs, "hidden")
		}
		if p.Shape.Experts > 0 {
			s.Outputs = append(s.Outputs, RoutingOutput)
		}
		return s, nil
	}, runCalibrate))
}

// calibrateOutputs lists the Hessian outputs of block l: one per captured site, one per expert of an
// expert site (HessianOutput names them), none for a site in skip.
func calibrateOutputs(s ModelShape, l int, skip []string) []string {
	var out []string
	c := s.Config()
	for _, site := range c.Sites(l) {
		switch {
		case !calib.Captured(site), slices.Contains(skip, siteOutput(l, site)):
		case site.Experts == 0:
			out = append(out, siteOutput(l, site))
		default:
			for e := range site.Experts {
				out = append(out, expertOutput(l, site, e))
			}
		}
	}
	return out
}

func windowInput(start int) string {
	if start == 0 {
		return "tokens"
	}
	return "hidden"
}

// windowSource opens the hidden states at the window's start: token embeddings for window 0, else
// the hidden-states file (its header must say layer start).
func windowSource(m *model.Model, req Request, start, nSeq, ctxLen int) (calib.HiddenSource, func(), error) {
	if start == 0 {
		seqs, err := ReadTokens(req.Inputs["tokens"].Path)
		if err != nil {
			return nil, nil, err
		}
		if len(seqs) != nSeq || len(seqs[0]) != ctxLen {
			return nil, nil, fmt.Errorf("tokens %s: %d sequences of %d, want %d of %d", req.Inputs["tokens"].Path, len(seqs), len(seqs[0]), nSeq, ctxLen)
		}
		src, err := calib.NewEmbeddingSource(m, seqs)
		return src, func() {}, err
	}
	in := req.Inputs["hidden"]
	f, err := os.Open(in.Path)
	if err != nil {
		return nil, nil, err
	}
	hr, err := calib.NewHiddenReader(bufio.NewReaderSize(f, 1<<20), in.Path)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if h := hr.Header(); h.Layer != start || h.NSeq != nSeq || h.SeqLen != ctxLen || h.NEmbd != m.Cfg.NEmbd {
		f.Close()
		return nil, nil, fmt.Errorf("hidden states %s: %+v, want layer %d, %d sequences of %d, n_embd %d", in.Path, h, start, nSeq, ctxLen, m.Cfg.NEmbd)
	}
	return hr, func() { f.Close() }, nil
}

// createHidden starts a hidden-states file for the states at layer end.
func createHidden(path string, nEmbd, ctxLen, nSeq, layer int) (*os.File, *bufio.Writer, *calib.HiddenWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, nil, nil, err
	}
	hh := calib.HiddenHeader{NEmbd: nEmbd, SeqLen: ctxLen, NSeq: nSeq, Layer: layer}
	bw := bufio.NewWriterSize(f, writeBufSize(hh.FileBytes()))
	hw, err := calib.NewHiddenWriter(bw, hh)
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	return f, bw, hw, nil
}

func runCalibrate(ctx context.Context, p CalibrateParams, req Request) error {
	m, _, gf, err := model.OpenGGUF(ctx, req.Inputs["model"].Path, 0)
	if err != nil {
		return err
	}
	defer gf.Close()
	if err := p.Shape.checkModel(req.Inputs["model"].Path, m.Cfg); err != nil {
		return err
	}
	// Weights stay in their source encoding (CalibrateMemory counts them so); results are the same bits.
	// Their bytes are mappings of the model file (GGUFSource.MapEncoded: no fresh memory to fault in);
	// calib releases each layer when its run ends.
	gs := m.Src.(*model.GGUFSource)
	gs.KeepEncoded, gs.MapEncoded = true, true
	src, done, err := windowSource(m, req, p.Start, p.Sequences, p.Ctx)
	if err != nil {
		return err
	}
	defer done()
	var hf *os.File
	var hb *bufio.Writer
	var hw *calib.HiddenWriter
	if p.Hidden {
		if hf, hb, hw, err = createHidden(req.Output("hidden"), m.Cfg.NEmbd, p.Ctx, p.Sequences, p.End); err != nil {
			return err
		}
		defer hf.Close()
	}
	skip, err := skipRefs(&m.Cfg, p.Start, p.End, p.Skip)
	if err != nil {
		return err
	}
	win := calib.Window{Start: p.Start, End: p.End, Skip: skip}
	var sampler *calib.ActSampler
	var res *calib.Result
	if p.ActSample > 0 {
		if sampler, err = calib.NewActSampler(&m.Cfg, win, p.Sequences, p.Ctx, p.ActSample); err != nil {
			return err
		}
	}
	// The Hessians' last updates are left to their files' encoders (calib.CaptureDeferred).
	res, err = calib.CaptureDeferred(ctx, m, win, src, hw, sampler)
	if err != nil {
		return fmt.Errorf("calibrating layers [%d, %d): %w", p.Start, p.End, err)
	}
	defer res.Release() // the pending updates' rows, once every file is written
	if sampler != nil {
		if err := writeActSamples(req, p, &m.Cfg, sampler); err != nil {
			return err
		}
	}
	if p.Hidden {
		if err := hb.Flush(); err != nil {
			return err
		}
		if err := hf.Close(); err != nil {
			return err
		}
	}
	type output struct {
		name string
		h    *calib.Hessian
	}
	var outs []output
	for l := p.Start; l < p.End; l++ {
		for i, site := range m.Cfg.Sites(l) {
			hs := res.Layers[l-p.Start][i]
			for e, h := range hs {
				name := siteOutput(l, site)
				if site.Experts > 0 {
					name = expertOutput(l, site, e)
					if h.Empty() {
						slog.WarnContext(ctx, "calibrate: an expert received no calibration tokens; its Hessian is empty (Tokens = 0) and GPTQ cannot use it",
							"layer", l, "expert", e, "output", name)
					}
				}
				outs = append(outs, output{req.Output(name), h})
			}
		}
	}
	// One file at a time: each is encoded (its pending update multiplied on the way), hashed and written
	// on every core (writeHessianFile), each worker's products on one OpenBLAS thread as in the capture.
	defer quant.SingleThreadedBLAS()()
	for _, o := range outs {
		newEnc := func() (hessianEncoder, func()) {
			enc := res.Encoder(o.h)
			return enc.Encode, enc.Release
		}
		if err := writeHessianFile(ctx, o.name, o.h.K, newEnc); err != nil {
			return err
		}
	}
	if p.Shape.Experts > 0 {
		return writeRouting(req.Output(RoutingOutput), res.Routing)
	}
	return nil
}
