package calib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"orkpipe/ork/model"
	"orkpipe/ork/quant"
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
//
// Skip, when not empty, lists sites of the window whose Hessians are not accumulated because no weight
// that reads them is quantized with one (a build that packs an MoE model's experts by round-to-nearest
// still calibrates for the routing statistics and the other sites' GPTQ): a skipped site costs its
// forward pass only, no Hessian memory, updates or file. Every [Captured] site not in Skip is captured.
type Window struct {
	Start, End int
	Skip       []SiteRef
}

// SiteRef names site Input of block Layer: model.Config.Sites(Layer)[Input].
type SiteRef struct {
	Layer int
	Input model.Input
}

// Captures reports whether the window accumulates a Hessian for site in (s) of block l: s is
// [Captured] and not in w.Skip.
func (w Window) Captures(l int, in model.Input, s model.Site) bool {
	return Captured(s) && !slices.Contains(w.Skip, SiteRef{Layer: l, Input: in})
}

// sameBlocks reports whether w and v run the same blocks (whatever their Skip).
func (w Window) sameBlocks(v Window) bool { return w.Start == v.Start && w.End == v.End }

func (w Window) check(c *model.Config) error {
	if w.Start < 0 || w.End <= w.Start || w.End > c.NLayer {
		return fmt.Errorf("window [%d, %d): want 0 <= start < end <= %d layers: %w", w.Start, w.End, c.NLayer, ErrShape)
	}
	for _, r := range w.Skip {
		if r.Layer < w.Start || r.Layer >= w.End || r.Input < 0 || int(r.Input) >= len(c.Sites(r.Layer)) || !Captured(c.Sites(r.Layer)[r.Input]) {
			return fmt.Errorf("window [%d, %d): skipped site %d of block %d: not a captured site of the window: %w", w.Start, w.End, r.Input, r.Layer, ErrShape)
		}
	}
	return nil
}

// Result holds the Hessians of one window, by site (model.Config.Sites): Layers[l-Start][i] are the
// Hessians of site i of block l — one for a site the block's weights share, one per expert for an expert
// site (over the tokens routed to that expert, rows not weighted by the routing probability; an expert
// no token reached has Tokens = 0 and an all-zero matrix, see Hessian.Empty) — or nil for a site not
// captured ([Window.Captures]).
type Result struct {
	Window Window
	Layers [][][]*Hessian
	// Routing is how the window's MoE blocks routed the calibration tokens (a RouteCounter's counts; nil
	// for a model without MoE blocks).
	Routing *Routing

	expertSite [][]bool // [l-Start][site]
	// pending holds the last update of each Hessian CaptureDeferred left pending (Encoder adds it).
	pending map[*Hessian]*pendingUpdate
	// sparse holds the Hessians CaptureDeferred made outside the Go heap (allocData) and their frees.
	sparse []sparseHessian
}

// Captured reports whether calibration accumulates a Hessian for site s: every site a packable weight
// reads, that is all but the MoE router's input (ffn_gate_inp stays float in every pack).
func Captured(s model.Site) bool {
	return !(len(s.Weights) == 1 && s.Weights[0].Name == "ffn_gate_inp")
}

// Hessian returns the Hessian of site in of block layer, nil for an expert site or a site not captured.
func (r *Result) Hessian(layer int, in model.Input) *Hessian {
	hs := r.site(layer, in)
	if hs == nil || r.expertSite[layer-r.Window.Start][in] {
		return nil
	}
	return hs[0]
}

// ExpertHessian returns the Hessian of expert e at expert site in of block layer, or nil when the site
// has no such expert.
func (r *Result) ExpertHessian(layer, e int, in model.Input) *Hessian {
	hs := r.site(layer, in)
	if hs == nil || !r.expertSite[layer-r.Window.Start][in] || e < 0 || e >= len(hs) {
		return nil
	}
	return hs[e]
}

func (r *Result) site(layer int, in model.Input) []*Hessian {
	if layer < r.Window.Start || layer >= r.Window.End || in < 0 || int(in) >= len(r.Layers[layer-r.Window.Start]) {
		return nil
	}
	return r.Layers[layer-r.Window.Start][in]
}

// observer routes a block's site inputs to the accumulators of the window: acc[l-start][site] holds one
// accumulator for a shared site, one per expert for an expert site, none for a site not captured.
type observer struct {
	start  int
	acc    [][][]*accumulator
	expert [][]bool       // [l-start][site]: an expert site
	tee    model.Observer // also sees every site that is not per expert (an ActSampler), or nil
	routes *RouteCounter  // MoE: the window's routing (routing.go)
	err    error
}

func (o *observer) sites(layer int, in model.Input) ([]*accumulator, bool, error) {
	l := layer - o.start
	if l < 0 || l >= len(o.acc) || in < 0 || int(in) >= len(o.acc[l]) {
		return nil, false, fmt.Errorf("layer %d: site %d: not a site of this window: %w", layer, in, ErrShape)
	}
	return o.acc[l][in], o.expert[l][in], nil
}

func (o *observer) Observe(layer int, in model.Input, x []float32) {
	if o.tee != nil {
		o.tee.Observe(layer, in, x)
	}
	if o.err != nil {
		return
	}
	as, expert, err := o.sites(layer, in)
	switch {
	case err != nil:
		o.err = err
	case expert:
		o.err = fmt.Errorf("layer %d: site %d is per expert, reported for all tokens: %w", layer, in, ErrShape)
	case len(as) == 1:
		o.err = as[0].add(x)
	}
}

func (o *observer) ObserveExpert(layer int, in model.Input, e int, x []float32) {
	if o.err != nil {
		return
	}
	as, expert, err := o.sites(layer, in)
	switch {
	case err != nil:
		o.err = err
	case expert && len(as) == 0: // a skipped site (Window.Skip)
	case !expert || e < 0 || e >= len(as):
		o.err = fmt.Errorf("layer %d: site %d, expert %d: no such expert input in this window: %w", layer, in, e, ErrShape)
	default:
		o.err = as[e].add(x)
	}
}

// Capture runs every sequence of in through blocks [w.Start, w.End) of m (whose weights are loaded
// once, for the whole window), accumulating the window's Hessians. When out is not nil, the hidden
// states at w.End are written to it (one-shot mode); out must be declared with in's sequence count and
// length and Layer = w.End, and is closed (digest appended) on success.
//
// Sequences run in chunks of about BatchRows tokens (chunkSeqs; model.Model.RunLayerBatch: every matrix
// product once over the chunk), and each Hessian takes its rows BatchRows at a time (one rank-BatchRows
// update), so the sums' order depends on the sequence length and count, never on timing.
func Capture(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter) (*Result, error) {
	return capture(ctx, m, w, in, out, finishSymmetric, nil)
}

// CaptureUpper is Capture without completing the Hessians: only their upper triangles (diagonal
// included) hold H, the strict lower triangles hold partial sums or zeros until Symmetrize. For a caller
// that only writes them (WriteHessian stores the upper triangle), it saves a pass over every matrix.
func CaptureUpper(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter) (*Result, error) {
	return capture(ctx, m, w, in, out, finishUpper, nil)
}

// finish is what capture leaves in the Hessians: complete matrices (Capture), upper triangles
// (CaptureUpper), or upper triangles with the last update pending (CaptureDeferred).
type finish int

const (
	finishSymmetric finish = iota
	finishUpper
	finishDeferred
)

// capture runs Capture, CaptureUpper or CaptureDeferred (fin); tee, when not nil, also sees every site
// that is not per expert (CaptureUpperSampled, CaptureDeferred with a sampler).
func capture(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter, fin finish, tee model.Observer) (*Result, error) {
	c := &m.Cfg
	if err := checkRun(c, w, in, out); err != nil {
		return nil, err
	}
	n := w.End - w.Start
	res := &Result{Window: w, Layers: make([][][]*Hessian, n), expertSite: make([][]bool, n)}
	obs := &observer{start: w.Start, acc: make([][][]*accumulator, n), expert: res.expertSite, tee: tee}
	if c.MoE() {
		obs.routes = NewRouteCounter(c.NExpert, c.NExpertUsed)
	}
	// The blocks of a window run one after another, so the accumulators of one site position share
	// one row batch (expert accumulators one per position too: the experts of a block run in turn).
	hdr := in.Header()
	batches := map[[2]int]*rowBatch{} // {position, expert site 0/1}
	var all []*accumulator
	for l := range n {
		sites := c.Sites(w.Start + l)
		res.Layers[l] = make([][]*Hessian, len(sites))
		obs.acc[l] = make([][]*accumulator, len(sites))
		res.expertSite[l] = make([]bool, len(sites))
		for i, s := range sites {
			res.expertSite[l][i] = s.Experts > 0
			if !w.Captures(w.Start+l, model.Input(i), s) {
				continue
			}
			key := [2]int{i, min(s.Experts, 1)}
			b := batches[key]
			if b == nil {
				b = &rowBatch{limit: batchRows(hdr.NSeq, hdr.SeqLen)}
				batches[key] = b
			}
			count := max(1, s.Experts)
			for range count {
				// With CaptureDeferred, Data is allocated by the first update (flush) or at the end (no
				// update pending), outside the Go heap (allocData): a Hessian whose only update is left
				// pending never needs one, and a large slice of recycled heap would be cleared, page by
				// page, on one goroutine.
				h := &Hessian{K: s.Width}
				if fin != finishDeferred {
					h.alloc()
				}
				a := newAccumulator(h, b)
				a.expert = s.Experts > 0
				if fin == finishDeferred {
					a.res = res
				}
				all = append(all, a)
				obs.acc[l][i] = append(obs.acc[l][i], a)
				res.Layers[l][i] = append(res.Layers[l][i], a.h)
			}
		}
	}
	// The products and updates fan out over Go workers themselves (model.Encoded, syrkTiles), each call
	// on one OpenBLAS thread: no BLAS thread spins between calls, and the dequantization runs on every core.
	defer quant.SingleThreadedBLAS()()
	defer func() {
		for _, b := range batches {
			b.release() // what a pending update did not take
		}
	}()
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
		if fin == finishDeferred {
			res.deferLast(a)
			if res.pending[a.h] == nil {
				a.allocData() // no update pending: the file is encoded from Data (zeros for an empty Hessian)
			}
			continue
		}
		a.flush()
		if fin == finishSymmetric {
			a.h.Symmetrize()
		}
	}
	res.releaseWithResult()
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
	defer quant.SingleThreadedBLAS()() // as in capture
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

// chunkSeqs is the number of sequences of seqLen tokens run through a block of c together: about
// BatchRows tokens, at least one sequence; about moeChunkRows in the pure-Go build for an MoE model whose
// experts are row-independent (model.Config.ExpertsRowIndependent). A routed expert sees about
// seqLen·k/E rows of a sequence (64 of 512 for LFM2-8B-A1B's 4 of 32 experts), so its products, and its
// rows decoded from the weight's encoding, are the chunk's smallest: larger chunks give them four times
// the rows for the same bits — every product of the chunk is sliced (its rows' values do not depend on
// the rows beside them), and GramUpper adds each row's products to a Hessian in order, whatever rows an
// update takes (under OpenBLAS neither holds: one update per expert and sequence as ever).
func chunkSeqs(c *model.Config, seqLen int) int {
	rows := BatchRows
	if pureGoBLAS() && c.ExpertsRowIndependent() {
		rows = moeChunkRows
	}
	return max(1, rows/seqLen)
}

// moeChunkRows is the tokens of a chunk of an MoE model (chunkSeqs); a variable for tests, which compare
// a model's Hessians and hidden states with chunks of BatchRows.
var moeChunkRows = 4 * BatchRows

func run(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter, obs *observer) error {
	layers := make([]*model.Layer, 0, w.End-w.Start)
	defer func() {
		for _, ly := range layers {
			ly.Release() // unmaps the weights of a GGUFSource with MapEncoded
		}
	}()
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
	chunk := make([]float32, min(chunkSeqs(&m.Cfg, hdr.SeqLen), hdr.NSeq)*seqVals)
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
