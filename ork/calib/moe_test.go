package calib

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/model"
	"orkpipe/ork/quant"
)

// moeTestConfig is a small generated llama-arch MoE model: 2 layers, n_embd 64, 4 experts of n_ff 96, top-2.
func moeTestConfig() model.Config {
	return model.Config{Arch: "llama", NEmbd: 64, NFF: 96, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 16, NVocab: 50,
		RopeDim: 16, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5, NExpert: 4, NExpertUsed: 2}
}

// zeroRouter serves a model whose router in block layer is all zeros: every router logit is equal, so
// every token goes to experts 0..k-1 and the other experts of that block receive none.
type zeroRouter struct {
	model.WeightSource
	layer int
}

func (z zeroRouter) Linear(ctx context.Context, name string) (model.Linear, bool, error) {
	l, ok, err := z.WeightSource.Linear(ctx, name)
	if err != nil || !ok || name != fmt.Sprintf("blk.%d.ffn_gate_inp.weight", z.layer) {
		return l, ok, err
	}
	d := *l.(*model.Dense)
	d.W = make([]float32, len(d.W))
	return &d, true, nil
}

func moeModel(t *testing.T, zeroLayer int) (*model.Model, [][]int32) {
	t.Helper()
	cfg := moeTestConfig()
	syn, err := model.NewSyntheticSource(cfg, 17)
	if err != nil {
		t.Fatal(err)
	}
	var src model.WeightSource = syn
	if zeroLayer >= 0 {
		src = zeroRouter{syn, zeroLayer}
	}
	m, err := model.NewModel(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([][]int32, 3)
	for i := range seqs {
		seqs[i] = make([]int32, 24)
		for j := range seqs[i] {
			seqs[i][j] = int32((i*13 + j*j*7 + j) % cfg.NVocab)
		}
	}
	return m, seqs
}

// naiveExperts accumulates Σ x·xᵀ per (layer, input, expert) with plain loops from what the forward
// pass shows an ExpertObserver: the reference for Capture's expert accumulators.
type naiveExperts struct {
	cfg model.Config
	h   map[[3]int][]float64
	n   map[[3]int]int64
}

func (r *naiveExperts) Observe(int, model.Input, []float32) {}

func (r *naiveExperts) ObserveExpert(layer int, in model.Input, e int, x []float32) {
	k := in.Width(&r.cfg)
	key := [3]int{layer, int(in), e}
	if r.h[key] == nil {
		r.h[key] = make([]float64, k*k)
	}
	for row := 0; row+k <= len(x); row += k {
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				r.h[key][i*k+j] += float64(x[row+i]) * float64(x[row+j])
			}
		}
		r.n[key]++
	}
}

// TestCaptureMoE: per-expert Hessians equal a naive accumulation of the rows routed to each expert;
// the expert token counts of each block add up to tokens × top-k; MoE blocks have no dense FFN Hessians.
func TestCaptureMoE(t *testing.T) {
	m, seqs := moeModel(t, -1)
	c := m.Cfg
	src, err := NewEmbeddingSource(m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Capture(context.Background(), m, Window{Start: 0, End: 2}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The reference runs the sequences as Capture does, in one batch (they fit one chunk), so that the
	// forward passes agree bit for bit in every build (OpenBLAS's sgemm rounds by row count).
	ref := &naiveExperts{cfg: c, h: map[[3]int][]float64{}, n: map[[3]int]int64{}}
	if len(seqs) > chunkSeqs(&m.Cfg, len(seqs[0])) {
		t.Fatalf("%d sequences of %d do not fit one chunk", len(seqs), len(seqs[0]))
	}
	defer quant.SingleThreadedBLAS()() // as Capture: under -tags blas its products run in per-core panels
	var h []float32
	for _, s := range seqs {
		x, err := m.Embed(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		h = append(h, x...)
	}
	for l := 0; l < 2; l++ {
		ly, err := model.LoadLayer(context.Background(), &m.Cfg, m.Src, l)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RunLayerBatch(context.Background(), ly, h, len(seqs[0]), ref); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(len(seqs) * len(seqs[0]))
	for l := 0; l < 2; l++ {
		if res.Hessian(l, model.InputGateUp) != nil || res.Hessian(l, model.InputDown) != nil {
			t.Fatalf("layer %d: an MoE block has dense FFN Hessians", l)
		}
		if h := res.Hessian(l, model.InputQKV); h == nil || h.Tokens != total {
			t.Fatalf("layer %d: attn_qkv Hessian %+v, want %d tokens", l, h, total)
		}
		var routed int64
		var counts []int64
		for e := 0; e < c.NExpert; e++ {
			for _, in := range []model.Input{model.InputGateUp, model.InputDown} {
				h := res.ExpertHessian(l, e, in)
				key := [3]int{l, int(in), e}
				if h == nil || h.K != in.Width(&c) || h.Tokens != ref.n[key] {
					t.Fatalf("layer %d expert %d %v: %+v, want K %d and %d tokens", l, e, in, h, in.Width(&c), ref.n[key])
				}
				if err := h.Check(); err != nil {
					t.Fatalf("layer %d expert %d %v: %v", l, e, in, err)
				}
				if h.Tokens > 0 {
					if d := maxRelDiff(ref.h[key], h.Data); d > 1e-12 {
						t.Errorf("layer %d expert %d %v: differs from the naive sum by %.3g", l, e, in, d)
					}
					checkPSD(t, h)
				}
			}
			routed += res.ExpertHessian(l, e, model.InputGateUp).Tokens
			counts = append(counts, res.ExpertHessian(l, e, model.InputGateUp).Tokens)
		}
		t.Logf("layer %d: tokens per expert %v", l, counts)
		if routed != total*int64(c.NExpertUsed) {
			t.Errorf("layer %d: %d routed rows, want %d tokens x top-%d", l, routed, total, c.NExpertUsed)
		}
	}
	if res.ExpertHessian(0, c.NExpert, model.InputGateUp) != nil || res.ExpertHessian(0, 0, model.InputQKV) != nil {
		t.Error("ExpertHessian answers for an expert or input that does not exist")
	}
}

// TestCaptureMoEUnroutedExperts: experts no token reaches get an empty (Tokens = 0, all-zero, valid)
// Hessian; the experts that get every token have all of them.
func TestCaptureMoEUnroutedExperts(t *testing.T) {
	m, seqs := moeModel(t, 1)
	src, _ := NewEmbeddingSource(m, seqs)
	res, err := Capture(context.Background(), m, Window{Start: 0, End: 2}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(seqs) * len(seqs[0]))
	for e := 0; e < m.Cfg.NExpert; e++ {
		for _, in := range []model.Input{model.InputGateUp, model.InputDown} {
			h := res.ExpertHessian(1, e, in)
			if err := h.Check(); err != nil {
				t.Fatal(err)
			}
			if e < m.Cfg.NExpertUsed {
				if h.Empty() || h.Tokens != total {
					t.Errorf("expert %d %v: %d tokens, want all %d", e, in, h.Tokens, total)
				}
				continue
			}
			if !h.Empty() {
				t.Errorf("expert %d %v: %d tokens, want none", e, in, h.Tokens)
			}
			for _, v := range h.Data {
				if v != 0 {
					t.Fatalf("expert %d %v: an unrouted expert's Hessian has a nonzero value", e, in)
				}
			}
		}
	}
}

// TestMoEWindowsChain: the MoE Hessians of [0, 2) in one pass equal those of [0, 1) and [1, 2) chained
// through the stored hidden states.
func TestMoEWindowsChain(t *testing.T) {
	m, seqs := moeModel(t, -1)
	dir := t.TempDir()
	src := func() HiddenSource {
		s, err := NewEmbeddingSource(m, seqs)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	whole := captureToFile(t, m, Window{Start: 0, End: 2}, src(), filepath.Join(dir, "whole.2"))
	captureToFile(t, m, Window{Start: 0, End: 1}, src(), filepath.Join(dir, "a.1"))
	second := captureToFile(t, m, Window{Start: 1, End: 2}, openHidden(t, filepath.Join(dir, "a.1")), filepath.Join(dir, "b.2"))
	for e := 0; e < m.Cfg.NExpert; e++ {
		for _, in := range []model.Input{model.InputGateUp, model.InputDown} {
			a, b := whole.ExpertHessian(1, e, in), second.ExpertHessian(1, e, in)
			if a.Tokens != b.Tokens || (a.Tokens > 0 && maxRelDiff(a.Data, b.Data) > 1e-6) {
				t.Errorf("layer 1 expert %d %v: one pass (%d tokens) and chained (%d tokens) differ", e, in, a.Tokens, b.Tokens)
			}
		}
	}
}

// TestMemoryEstimateMoE compares EstimateMemory with Capture's peak heap on one MoE block (8 experts).
func TestMemoryEstimateMoE(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "allocates about 1 GiB")
	}
	checkMemoryEstimate(t, "MoE window (n_embd 2048, 8 experts of n_ff 1408, top-2)", model.Config{Arch: "llama", NEmbd: 2048, NFF: 1408,
		NLayer: 1, NHead: 16, NHeadKV: 4, HeadDim: 128, NVocab: 256, RopeDim: 128, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5,
		NExpert: 8, NExpertUsed: 2})
}

// TestExpertHessianChoice measures why expert slices get per-expert Hessians (over the tokens routed to
// each expert) rather than one shared Hessian of the block's FFN input (over every token: Σ_e H_e / k,
// since every token reaches k experts): GPTQ of each expert's gate slice with either, scored by what
// matters for that expert, its output error over its own routed tokens, e = Σ_n (w_n−q_n)ᵀ H_e (w_n−q_n)
// relative to Σ_n w_nᵀ H_e w_n. On the synthetic llama MoE (softmax router) and on tiny-lfm2moe's first
// MoE block (sigmoid router with expert bias) the per-expert Hessian must not lose on the sum over
// experts.
func TestExpertHessianChoice(t *testing.T) {
	synth, _ := moeModel(t, -1)
	seqs := make([][]int32, 16)
	for i := range seqs {
		seqs[i] = make([]int32, 32)
		for j := range seqs[i] {
			seqs[i][j] = int32((i*29 + j*j*3 + 5*j) % synth.Cfg.NVocab)
		}
	}
	lfm, lseqs := hybridModel(t, "tiny-lfm2moe.gguf")
	for _, c := range []struct {
		name   string
		m      *model.Model
		seqs   [][]int32
		layer  int
		window Window
	}{
		{"synthetic llama MoE, 4 experts top-2", synth, seqs, 0, Window{Start: 0, End: 1}},
		{"tiny-lfm2moe block 2, 8 experts top-2", lfm, lseqs, 2, Window{Start: 0, End: 3}},
	} {
		t.Run(c.name, func(t *testing.T) { expertHessianChoice(t, c.m, c.seqs, c.window, c.layer) })
	}
}

func expertHessianChoice(t *testing.T, m *model.Model, seqs [][]int32, w Window, layer int) {
	c := m.Cfg
	src, err := NewEmbeddingSource(m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Capture(context.Background(), m, w, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := c.NEmbd
	shared := quant.NewHessian(k)
	for e := 0; e < c.NExpert; e++ {
		for i, v := range res.ExpertHessian(layer, e, model.InputGateUp).Data {
			shared.Data[i] += v / float64(c.NExpertUsed)
		}
	}
	score := func(w []float32, q *quant.Weight, h *Hessian) float64 {
		deq := q.Dequantize()
		var num, den float64
		for n := 0; n < len(w)/k; n++ {
			for i := 0; i < k; i++ {
				for j := 0; j < k; j++ {
					hij := h.Data[i*k+j]
					num += float64(w[n*k+i]-deq[n*k+i]) * hij * float64(w[n*k+j]-deq[n*k+j])
					den += float64(w[n*k+i]) * hij * float64(w[n*k+j])
				}
			}
		}
		return math.Sqrt(num / den)
	}
	var sumOwn, sumShared float64
	tokens := len(seqs) * len(seqs[0])
	for e := 0; e < c.NExpert; e++ {
		name := fmt.Sprintf("blk.%d.ffn_gate_exps.weight#%d", layer, e)
		lin, ok, err := m.Src.Linear(context.Background(), name)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", name, ok, err)
		}
		d := lin.(*model.Dense)
		mat := quant.Matrix{Name: name, Rows: d.N, Cols: d.K, Data: d.W}
		he := res.ExpertHessian(layer, e, model.InputGateUp)
		own := quant.Hessian(*he)
		qo, err := quant.GPTQ(context.Background(), mat, &own, quant.WithBits(4), quant.WithGroup(32))
		if err != nil {
			t.Fatal(err)
		}
		qs, err := quant.GPTQ(context.Background(), mat, shared, quant.WithBits(4), quant.WithGroup(32))
		if err != nil {
			t.Fatal(err)
		}
		eo, es := score(d.W, qo, he), score(d.W, qs, he)
		t.Logf("expert %d (%d routed tokens of %d): output error on its tokens %.4f with its own Hessian, %.4f with the shared one (%.3fx)",
			e, he.Tokens, tokens, eo, es, es/eo)
		sumOwn += eo
		sumShared += es
	}
	t.Logf("mean over experts: own %.4f, shared %.4f (shared/own %.3fx)", sumOwn/float64(c.NExpert), sumShared/float64(c.NExpert), sumShared/sumOwn)
	if sumOwn > sumShared {
		t.Errorf("per-expert Hessians give a larger routed-token error (%.4f) than one shared Hessian (%.4f)", sumOwn, sumShared)
	}
}

// TestCaptureSkip: a window that skips sites (Window.Skip: tiny-lfm2moe's expert sites of block 2 and
// the shared FFN site of dense block 1) leaves their Hessians nil and gives every other site's Hessian
// and the routing statistics bit for bit as the capture without Skip, in all three forms (symmetric,
// upper, deferred with its encoded file); a Skip naming a site outside the window, or one calibration
// never captures (the router's input), is refused.
func TestCaptureSkip(t *testing.T) {
	// sameSums: the pure-Go build sums each Hessian value in token order however its updates are split
	// into batches, so Skip (which moves the flushes of batches shared between sites) changes no bit;
	// OpenBLAS's sums depend on the split, to float64's rounding.
	sameSums := func(a, b []float64) bool {
		if quant.BLASBackend == "gonum" {
			return slices.Equal(a, b)
		}
		return len(a) == len(b) && maxRelDiff(a, b) <= 1e-12
	}
	m, seqs := hybridModel(t, "tiny-lfm2moe.gguf")
	c := &m.Cfg
	ctx := context.Background()
	var skip []SiteRef
	var router SiteRef
	for l := 1; l < 3; l++ {
		for i, s := range c.Sites(l) {
			switch {
			case !Captured(s):
				router = SiteRef{Layer: l, Input: model.Input(i)}
			case s.Experts > 0, l == 1 && i == int(model.InputGateUp):
				skip = append(skip, SiteRef{Layer: l, Input: model.Input(i)})
			}
		}
	}
	if len(skip) != 3 || router.Layer != 2 {
		t.Fatalf("premise: skipped sites %v (want block 1's gate/up and block 2's two expert sites), router %v", skip, router)
	}
	src := func() HiddenSource {
		s, err := NewEmbeddingSource(m, seqs)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	all, err := Capture(ctx, m, Window{Start: 0, End: 3}, src(), nil)
	if err != nil {
		t.Fatal(err)
	}
	part, err := Capture(ctx, m, Window{Start: 0, End: 3, Skip: skip}, src(), nil)
	if err != nil {
		t.Fatal(err)
	}
	allDeferred, err := CaptureDeferred(ctx, m, Window{Start: 0, End: 3}, src(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer allDeferred.Release()
	deferred, err := CaptureDeferred(ctx, m, Window{Start: 0, End: 3, Skip: skip}, src(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer deferred.Release()
	kept := 0
	for l := 0; l < 3; l++ {
		for i := range c.Sites(l) {
			ref := SiteRef{Layer: l, Input: model.Input(i)}
			a, p, d := all.Layers[l][i], part.Layers[l][i], deferred.Layers[l][i]
			if slices.Contains(skip, ref) {
				if p != nil || d != nil {
					t.Errorf("skipped site %v: %d and %d Hessians captured, want none", ref, len(p), len(d))
				}
				continue
			}
			if len(a) != len(p) || len(a) != len(d) {
				t.Fatalf("site %v: %d Hessians with Skip (%d deferred), %d without", ref, len(p), len(d), len(a))
			}
			for e := range a {
				if a[e].Tokens != p[e].Tokens || !sameSums(a[e].Data, p[e].Data) {
					t.Errorf("site %v (%d): the Hessian differs with Skip", ref, e)
				}
				want := encodeAll(t, a[e].K, 4096, allDeferred.Encoder(allDeferred.Layers[l][i][e]).Encode)
				got := encodeAll(t, d[e].K, 4096, deferred.Encoder(d[e]).Encode)
				if !bytes.Equal(want, got) {
					t.Errorf("site %v (%d): the deferred file differs with Skip", ref, e)
				}
				kept++
			}
		}
	}
	if kept == 0 || !reflect.DeepEqual(all.Routing, part.Routing) || !reflect.DeepEqual(all.Routing, deferred.Routing) {
		t.Errorf("%d Hessians compared; routing with Skip %+v, without %+v", kept, part.Routing, all.Routing)
	}
	if EstimateMemory(c, Window{Start: 0, End: 3, Skip: skip}, len(seqs), len(seqs[0])) >= EstimateMemory(c, Window{Start: 0, End: 3}, len(seqs), len(seqs[0])) {
		t.Error("the memory estimate does not shrink with Skip")
	}
	for _, bad := range [][]SiteRef{{{Layer: 3, Input: 0}}, {router}} {
		if _, err := Capture(ctx, m, Window{Start: 0, End: 3, Skip: bad}, src(), nil); !errors.Is(err, ErrShape) {
			t.Errorf("Skip %v: %v, want ErrShape", bad, err)
		}
	}
}

// TestCaptureMoEChunks: with experts wide enough for sliced products, an MoE model's calibration runs
// moeChunkRows tokens a chunk in the pure-Go build and gives the Hessians and hidden states it gives
// with chunks of BatchRows, bit for bit (chunkSeqs).
func TestCaptureMoEChunks(t *testing.T) {
	cfg := model.Config{Arch: "llama", NEmbd: 256, NFF: 256, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 64, NVocab: 50,
		RopeDim: 64, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5, NExpert: 4, NExpertUsed: 2}
	if !pureGoBLAS() {
		testfiles.SkipBuild(t, "-tags blas: an MoE model's chunks are BatchRows tokens (OpenBLAS's sums depend on the rows of a call)")
	}
	if !cfg.ExpertsRowIndependent() {
		t.Fatal("the pure-Go build's experts of this model are not row-independent (sgemm.Sliced): its chunks would be BatchRows tokens and the test would compare nothing; widen them")
	}
	syn, err := model.NewSyntheticSource(cfg, 23)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewModel(cfg, syn)
	if err != nil {
		t.Fatal(err)
	}
	const seqLen = 128
	seqs := make([][]int32, 6)
	for i := range seqs {
		seqs[i] = make([]int32, seqLen)
		for j := range seqs[i] {
			seqs[i][j] = int32((i*13 + j*j*7 + j) % cfg.NVocab)
		}
	}
	capture := func(rows int) (*Result, []byte) {
		t.Helper()
		defer func(prev int) { moeChunkRows = prev }(moeChunkRows)
		moeChunkRows = rows
		src, err := NewEmbeddingSource(m, seqs)
		if err != nil {
			t.Fatal(err)
		}
		hdr := src.Header()
		hdr.Layer = 2
		var buf bytes.Buffer
		out, err := NewHiddenWriter(&buf, hdr)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Capture(context.Background(), m, Window{Start: 0, End: 2}, src, out)
		if err != nil {
			t.Fatal(err)
		}
		return res, buf.Bytes()
	}
	if got := chunkSeqs(&cfg, seqLen); got != 16 {
		t.Fatalf("chunks of %d sequences of %d, want 16", got, seqLen)
	}
	small, smallOut := capture(BatchRows) // 4 sequences, then 2
	large, largeOut := capture(moeChunkRows)
	if !bytes.Equal(smallOut, largeOut) {
		t.Error("hidden states at layer 2 differ between chunks of 4 and 16 sequences")
	}
	for l := range small.Layers {
		for in, hs := range small.Layers[l] {
			for e, h := range hs {
				g := large.Layers[l][in][e]
				if h.Tokens != g.Tokens || !slices.EqualFunc(h.Data, g.Data, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }) {
					t.Errorf("layer %d input %d Hessian %d: %d tokens with chunks of 4 sequences, %d with 16, or other values", l, in, e, h.Tokens, g.Tokens)
				}
			}
		}
	}
}
