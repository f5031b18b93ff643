package calib

import (
	"context"
	"errors"
	"fmt"
	"io"

	"orkpipe/ork/model"
)

// Sequences cuts nSeq consecutive sequences of seqLen tokens from the start of tokens, replacing the
// first token of each by bos (unless bos is model.NoToken), the way llama-perplexity forms its chunks.
// It is deterministic; fewer than nSeq·seqLen tokens is an error.
func Sequences(tokens []int32, nSeq, seqLen int, bos int32) ([][]int32, error) {
	if nSeq <= 0 || seqLen <= 0 {
		return nil, fmt.Errorf("calibration corpus of %d sequences of %d tokens: both must be positive: %w", nSeq, seqLen, ErrShape)
	}
	if len(tokens) < nSeq*seqLen {
		return nil, fmt.Errorf("calibration corpus has %d tokens, %d sequences of %d need %d: %w", len(tokens), nSeq, seqLen, nSeq*seqLen, ErrShape)
	}
	out := make([][]int32, nSeq)
	for i := range out {
		s := append([]int32(nil), tokens[i*seqLen:(i+1)*seqLen]...)
		if bos != model.NoToken {
			s[0] = bos
		}
		out[i] = s
	}
	return out, nil
}

// EmbeddingSource is the HiddenSource of layer 0: the token embeddings of each sequence.
type EmbeddingSource struct {
	m    *model.Model
	seqs [][]int32
	next int
}

// NewEmbeddingSource returns the layer-0 hidden states of seqs (all of one length) under m.
func NewEmbeddingSource(m *model.Model, seqs [][]int32) (*EmbeddingSource, error) {
	if len(seqs) == 0 || len(seqs[0]) == 0 {
		return nil, fmt.Errorf("embedding source: no sequences: %w", ErrShape)
	}
	for i, s := range seqs {
		if len(s) != len(seqs[0]) {
			return nil, fmt.Errorf("sequence %d has %d tokens, sequence 0 has %d: %w", i, len(s), len(seqs[0]), ErrShape)
		}
	}
	return &EmbeddingSource{m: m, seqs: seqs}, nil
}

// Header implements HiddenSource.
func (e *EmbeddingSource) Header() HiddenHeader {
	return HiddenHeader{NEmbd: e.m.Cfg.NEmbd, SeqLen: len(e.seqs[0]), NSeq: len(e.seqs), Layer: 0}
}

// Next implements HiddenSource.
func (e *EmbeddingSource) Next(ctx context.Context) ([]float32, error) {
	if e.next == len(e.seqs) {
		return nil, io.EOF
	}
	h, err := e.m.Embed(ctx, e.seqs[e.next])
	if err != nil {
		return nil, fmt.Errorf("sequence %d: %w", e.next, err)
	}
	e.next++
	return h, nil
}

// Window is the half-open layer range [Start, End).
type Window struct{ Start, End int }

func (w Window) check(c *model.Config) error {
	if w.Start < 0 || w.End <= w.Start || w.End > c.NLayer {
		return fmt.Errorf("window [%d, %d): want 0 <= start < end <= %d layers: %w", w.Start, w.End, c.NLayer, ErrShape)
	}
	return nil
}

// Result holds the Hessians of one window: Hessians[l-Start][in] for block l and input in. In an MoE
// block (model.Config.MoE) Hessians[l-Start] holds only InputQKV and InputAttnO (the FFN inputs are the
// experts') and Experts[l-Start][e] the Hessians of expert e; Experts is nil for a dense model.
type Result struct {
	Window   Window
	Hessians [][model.NumInputs]*Hessian
	Experts  [][]ExpertHessians
	// Routing is how the window's MoE blocks routed the calibration tokens (CountRouting's counts; nil for
	// a dense model).
	Routing *Routing
}

// ExpertHessians are the Hessians of one expert of an MoE block, over the tokens routed to it (rows are
// not weighted by the routing probability): GateUp of its gate and up input (the ffn_norm output of those
// tokens, n_embd wide) and Down of its down input (silu(gate)·up of those tokens, n_ff wide). An expert
// no token was routed to has Tokens = 0 and all-zero matrices (see Hessian.Empty).
type ExpertHessians struct {
	GateUp, Down *Hessian
}

// Hessian returns the Hessian of input in of block layer (nil for the FFN inputs of an MoE block).
func (r *Result) Hessian(layer int, in model.Input) *Hessian {
	return r.Hessians[layer-r.Window.Start][in]
}

// ExpertHessian returns the Hessian of input in (model.InputGateUp or model.InputDown) of expert e of
// MoE block layer, or nil when the block has no such expert.
func (r *Result) ExpertHessian(layer, e int, in model.Input) *Hessian {
	if r.Experts == nil || e < 0 || e >= len(r.Experts[layer-r.Window.Start]) {
		return nil
	}
	x := r.Experts[layer-r.Window.Start][e]
	switch in {
	case model.InputGateUp:
		return x.GateUp
	case model.InputDown:
		return x.Down
	}
	return nil
}

// observer routes a block's linear inputs to the accumulators of the window. A nil accumulator (the
// router input of an MoE block) is not captured.
type observer struct {
	start  int
	acc    [][model.NumInputs]*accumulator
	exp    [][][2]*accumulator // MoE: [layer-start][expert]{gate/up, down}
	tee    model.Observer      // also sees every site that is not per expert (an ActSampler), or nil
	routes *RouteCounter       // MoE: the window's routing (routing.go)
	err    error
}

func (o *observer) Observe(layer int, in model.Input, x []float32) {
	if o.tee != nil {
		o.tee.Observe(layer, in, x)
	}
	if int(in) >= len(o.acc[layer-o.start]) {
		return // a site not captured (model.InputRouter: the MoE router's input)
	}
	if a := o.acc[layer-o.start][in]; o.err == nil && a != nil {
		o.err = a.add(x)
	}
}

func (o *observer) ObserveExpert(layer int, in model.Input, e int, x []float32) {
	if o.err != nil {
		return
	}
	if o.exp == nil || e < 0 || e >= len(o.exp[layer-o.start]) || (in != model.InputGateUp && in != model.InputDown) {
		o.err = fmt.Errorf("layer %d: input %s of expert %d: no such expert input in this window: %w", layer, in, e, ErrShape)
		return
	}
	i := 0
	if in == model.InputDown {
		i = 1
	}
	o.err = o.exp[layer-o.start][e][i].add(x)
}

// Capture runs every sequence of in through blocks [w.Start, w.End) of m (whose weights are loaded
// once, for the whole window), accumulating the window's Hessians. When out is not nil, the hidden
// states at w.End are written to it (one-shot mode); out must be declared with in's sequence count and
// length and Layer = w.End, and is closed (digest appended) on success.
//
// Sequences run in chunks of about BatchRows tokens (model.Model.RunLayerBatch: every matrix product
// once over the chunk), and each Hessian takes its rows BatchRows at a time (one rank-BatchRows update),
// so the sums' order depends on the sequence length and count, never on timing.
func Capture(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter) (*Result, error) {
	return capture(ctx, m, w, in, out, true, nil)
}

// CaptureUpper is Capture without completing the Hessians: only their upper triangles (diagonal
// included) hold H, the strict lower triangles hold partial sums or zeros until Symmetrize. For a caller
// that only writes them (WriteHessian stores the upper triangle), it saves a pass over every matrix.
func CaptureUpper(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter) (*Result, error) {
	return capture(ctx, m, w, in, out, false, nil)
}

// capture runs Capture (symmetrize) or CaptureUpper; tee, when not nil, also sees every site that is not
// per expert (CaptureUpperSampled).
func capture(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter, symmetrize bool, tee model.Observer) (*Result, error) {
	c := &m.Cfg
	if err := checkRun(c, w, in, out); err != nil {
		return nil, err
	}
	res := &Result{Window: w, Hessians: make([][model.NumInputs]*Hessian, w.End-w.Start)}
	obs := &observer{start: w.Start, acc: make([][model.NumInputs]*accumulator, w.End-w.Start), tee: tee}
	// The blocks of a window run one after another, so the accumulators of one input of all blocks
	// share one row batch (likewise the experts' gate/up and down inputs).
	hdr := in.Header()
	var batches [model.NumInputs + 2]rowBatch // the block inputs, then the experts' gate/up and down
	for i := range batches {
		batches[i].limit = batchRows(hdr.NSeq, hdr.SeqLen)
	}
	var all []*accumulator
	newAcc := func(k int, b *rowBatch) *accumulator {
		a := newAccumulator(NewHessian(k), b)
		all = append(all, a)
		return a
	}
	if c.MoE() {
		res.Experts = make([][]ExpertHessians, w.End-w.Start)
		obs.exp = make([][][2]*accumulator, w.End-w.Start)
		obs.routes = NewRouteCounter(c.NExpert, c.NExpertUsed)
	}
	for l := range res.Hessians {
		for in := model.Input(0); in < model.NumInputs; in++ {
			if c.MoE() && (in == model.InputGateUp || in == model.InputDown) {
				continue
			}
			obs.acc[l][in] = newAcc(in.Width(c), &batches[in])
			res.Hessians[l][in] = obs.acc[l][in].h
		}
		if c.MoE() {
			res.Experts[l] = make([]ExpertHessians, c.NExpert)
			obs.exp[l] = make([][2]*accumulator, c.NExpert)
			for e := range res.Experts[l] {
				gu, dn := newAcc(c.NEmbd, &batches[model.NumInputs]), newAcc(c.NFF, &batches[model.NumInputs+1])
				obs.exp[l][e] = [2]*accumulator{gu, dn}
				res.Experts[l][e] = ExpertHessians{GateUp: gu.h, Down: dn.h}
			}
		}
	}
	if err := run(ctx, m, w, in, out, obs); err != nil {
		return nil, err
	}
	if obs.routes != nil {
		r, err := obs.routes.Routing()
		if err != nil {
			return nil, fmt.Errorf("window [%d, %d): %w", w.Start, w.End, err)
		}
		res.Routing = &r
	}
	for _, a := range all {
		a.flush()
		if symmetrize {
			a.h.Symmetrize()
		}
	}
	return res, nil
}

// Propagate runs every sequence of in through blocks [w.Start, w.End) of m and writes the hidden states
// at w.End to out, without Hessians. In sequential mode m's weight source emulates the quantized window,
// so the next window sees the activations the board will see.
func Propagate(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter) error {
	if out == nil {
		return fmt.Errorf("propagate window [%d, %d): no output: %w", w.Start, w.End, ErrShape)
	}
	if err := checkRun(&m.Cfg, w, in, out); err != nil {
		return err
	}
	return run(ctx, m, w, in, out, nil)
}

func checkRun(c *model.Config, w Window, in HiddenSource, out *HiddenWriter) error {
	if err := w.check(c); err != nil {
		return err
	}
	hi := in.Header()
	if hi.NEmbd != c.NEmbd || hi.Layer != w.Start {
		return fmt.Errorf("window [%d, %d): input hidden states are %d wide at layer %d, want %d wide at layer %d: %w",
			w.Start, w.End, hi.NEmbd, hi.Layer, c.NEmbd, w.Start, ErrShape)
	}
	if out != nil {
		ho := out.Header()
		if ho != (HiddenHeader{NEmbd: c.NEmbd, SeqLen: hi.SeqLen, NSeq: hi.NSeq, Layer: w.End}) {
			return fmt.Errorf("window [%d, %d): output declared as %+v for input %+v: %w", w.Start, w.End, ho, hi, ErrShape)
		}
	}
	return nil
}

// chunkSeqs is the number of sequences of seqLen tokens run through a block together: about BatchRows
// tokens, at least one sequence.
func chunkSeqs(seqLen int) int { return max(1, BatchRows/seqLen) }

func run(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter, obs *observer) error {
	layers := make([]*model.Layer, 0, w.End-w.Start)
	for l := w.Start; l < w.End; l++ {
		ly, err := model.LoadLayer(ctx, &m.Cfg, m.Src, l)
		if err != nil {
			return err
		}
		layers = append(layers, ly)
	}
	hdr := in.Header()
	var o model.Observer
	if obs != nil {
		o = obs
	}
	seqVals := hdr.SeqLen * hdr.NEmbd
	chunk := make([]float32, min(chunkSeqs(hdr.SeqLen), hdr.NSeq)*seqVals)
	for s0 := 0; s0 < hdr.NSeq; {
		n := 0 // sequences in this chunk
		for ; s0+n < hdr.NSeq && (n+1)*seqVals <= len(chunk); n++ {
			h, err := in.Next(ctx)
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("hidden states ended after %d of %d sequences: %w", s0+n, hdr.NSeq, ErrShape)
			}
			if err != nil {
				return err
			}
			if len(h) != seqVals {
				return fmt.Errorf("sequence %d: %d values, want %d × %d: %w", s0+n, len(h), hdr.SeqLen, hdr.NEmbd, ErrShape)
			}
			copy(chunk[n*seqVals:], h)
		}
		for _, ly := range layers {
			if err := m.RunLayerBatch(ctx, ly, chunk[:n*seqVals], hdr.SeqLen, o); err != nil {
				return fmt.Errorf("sequences [%d, %d): %w", s0, s0+n, err)
			}
			if obs != nil && obs.err != nil {
				return fmt.Errorf("sequences [%d, %d), layer %d: %w", s0, s0+n, ly.Index, obs.err)
			}
		}
		if out != nil {
			for i := 0; i < n; i++ {
				if err := out.WriteSeq(chunk[i*seqVals : (i+1)*seqVals]); err != nil {
					return err
				}
			}
		}
		s0 += n
	}
	if _, err := in.Next(ctx); !errors.Is(err, io.EOF) {
		if err == nil {
			return fmt.Errorf("hidden states hold more than the %d sequences their header declares: %w", hdr.NSeq, ErrShape)
		}
		return err
	}
	if out != nil {
		return out.Close()
	}
	return nil
}
