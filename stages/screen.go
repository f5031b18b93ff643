package stages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"

	"orkpipe/ork/calib"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
)

// ScreenParams are the parameters of "screen": offline perplexity and KL divergence of the pack
// (every entry emulated with the board's arithmetic) against the float source model on an
// evaluation text, computed as llama-perplexity does, and the gates that fail the build.
type ScreenParams struct {
	Shape       ModelShape `json:"shape"`
	Ctx         int        `json:"ctx"`
	Chunks      int        `json:"chunks"`                  // 0 = every chunk
	MaxPPLRatio float64    `json:"max_ppl_ratio,omitempty"` // 0 = no gate
	MaxKLDMean  float64    `json:"max_kld_mean,omitempty"`  // 0 = no gate
	// TextName labels the evaluation text in messages (the file's base name; the stage sees a store path).
	TextName string `json:"text_name"`
	// Routing (an MoE model only) adds the output "routing.json": how the float model's MoE blocks
	// routed the text's chunks in the screen's own forward passes — the held-out routing a residency
	// plan is scored against, at no extra forward pass (calib.Routing in its routing.json form).
	Routing bool `json:"routing,omitempty"`
	// Emulated is the geometry of every entry the pack may hold (EmulatedEntries: each once), so the
	// node declares the scratch of its emulation (ScreenMemory): an entry padded to a large rotation
	// block takes scratch in proportion to its padded K. An entry the pack holds past what these
	// declare is refused before any is read (model.PackSource.CheckEmulationMemory).
	Emulated []EmulatedEntry `json:"emulated,omitempty"`
	// TextChunks (0: not known) is the most chunks of Ctx tokens the text fills: the planner's bound
	// from its size (a token spells at least one byte; BOS and a prefix space aside, size+2 tokens).
	// With Chunks it bounds the chunks the node evaluates (EvalChunks), and so what it declares for
	// the chunks run through a block at once (ScreenMemory); the screen refuses a text that fills more.
	TextChunks int `json:"text_chunks,omitempty"`
}

// EvalChunks is the most chunks the screen evaluates, as far as its parameters say: Chunks, at most
// TextChunks (0: any number, neither bounds them).
func (p ScreenParams) EvalChunks() int {
	switch {
	case p.Chunks > 0 && p.TextChunks > 0:
		return min(p.Chunks, p.TextChunks)
	case p.Chunks > 0:
		return p.Chunks
	}
	return p.TextChunks
}

// ScreenResult is the "screen.json" output. KLDPercentiles is the distribution of the per-token KL
// divergence (the value at 0, 1, ..., 100 % of the scored tokens) that report.html draws; SameTopErr
// is the standard error of SameTop.
type ScreenResult struct {
	Ctx            int             `json:"ctx"`
	Chunks         int             `json:"chunks"`
	Tokens         int             `json:"tokens"`
	Scored         int             `json:"scored"`
	PPL            float64         `json:"ppl"`
	PPLErr         float64         `json:"ppl_err"`
	BasePPL        float64         `json:"base_ppl"`
	BasePPLErr     float64         `json:"base_ppl_err"`
	PPLRatio       float64         `json:"ppl_ratio"`
	KLDMean        float64         `json:"kld_mean"`
	KLD            *model.KLDStats `json:"kld"`
	KLDPercentiles []float64       `json:"kld_percentiles,omitempty"`
	SameTop        float64         `json:"same_top"`
	SameTopErr     float64         `json:"same_top_err"`
	Gates          ScreenGates     `json:"gates"`
}

// ScreenGates records the thresholds applied (0: none).
type ScreenGates struct {
	MaxPPLRatio float64 `json:"max_ppl_ratio,omitempty"`
	MaxKLDMean  float64 `json:"max_kld_mean,omitempty"`
}

// ErrGate is wrapped by the error of a screen whose gate failed.
var ErrGate = errors.New("screen gate failed")

// screenCache is how much of the float model screen keeps dequantized in memory (the GGUFSource's
// cache limit): every float32 tensor, at most 2 GiB.
func screenCache(s ModelShape) int64 {
	c := s.Config()
	e, v := int64(c.NEmbd), int64(c.NVocab)
	packable, router := s.blockWeights()
	all := int64(c.NLayer)*4*(packable+router+2*e) + 4*2*e*v
	return min(all, 2<<30)
}

// screenCached bounds what that cache holds: with the matmul weights held encoded (model.KeepsEncoded:
// quantized, F16, BF16 sources) only the blocks' vectors, the MoE routers and the embedding and output
// matrices are float32 and cached; else every tensor up to the limit.
func screenCached(s ModelShape) int64 {
	c := s.Config()
	if !model.KeepsEncoded(c.WeightType) {
		return screenCache(s)
	}
	e, v := int64(c.NEmbd), int64(c.NVocab)
	_, router := s.blockWeights()
	all := 4*2*e*v + 4*e
	for l := range c.NLayer {
		all += calib.LayerVectorBytes(&c, l) + 4*router
	}
	return min(all, screenCache(s))
}

// ScreenMemory is the declared peak memory of a screen node evaluating chunks chunks of ctxLen tokens
// (0: any number; ScreenParams.EvalChunks): the cached float tensors (screenCached), two blocks'
// weights — the one running and the next one loading (model.Model.Forward) — each as held (source
// weights encoded or float32, calib.LayerWeightBytes) plus their emulated codes and scales (up to 5
// bytes a packable value), the logits of the pack and of the float model, the forward passes' scratch
// (model.Config.EvalScratchBytes), the dequantization scratch of one Apply of an encoded weight, and
// the hidden states of both models for the chunks run through each block at once
// (model.EvalGroupChunks, at most chunks), and the scratch of one Apply of the emulation of the entries
// es (EmulationScratch: on a chunk of ctxLen tokens, a routed expert's slice on the tokens of the
// chunks an evaluation of chunks chunks hands it at once, model.Config.EvalExpertTokens) beside 96 MiB
// for the process.
func ScreenMemory(s ModelShape, ctxLen, chunks int, es []EmulatedEntry) int64 {
	c := s.Config()
	emu := EmulationScratch(es, ctxLen, c.EvalExpertTokens(ctxLen, 2, chunks))
	if emu == math.MaxInt64 {
		return emu
	}
	e, v, t := int64(c.NEmbd), int64(c.NVocab), int64(ctxLen)
	var layer int64
	for l := range c.NLayer {
		layer = max(layer, calib.LayerWeightBytes(&c, l)+5*PackableValues(&c, l))
	}
	group := model.EvalGroupChunks(c.NEmbd, ctxLen, 2)
	if chunks > 0 {
		group = min(group, chunks)
	}
	return 96<<20 + emu + screenCached(s) + 2*layer + 4*t*v*4 + 2*c.EvalScratchBytes(ctxLen, 2, chunks) + c.BlockScratchBytes() + int64(group)*8*t*e
}

// PackableValues is the number of values of block l's weights a pack may hold (every site weight but
// the MoE router's, every expert slice): their emulated codes take up to 5 bytes a value.
func PackableValues(c *model.Config, l int) int64 {
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
	Register(Define("screen", 6, func(p ScreenParams) (Spec, error) {
		if err := p.Shape.validate(); err != nil {
			return Spec{}, err
		}
		if p.Ctx < 4 || p.Chunks < 0 || p.TextChunks < 0 || p.MaxPPLRatio < 0 || p.MaxKLDMean < 0 {
			return Spec{}, fmt.Errorf("ctx %d (>= 4), chunks %d (>= 0), text_chunks %d (>= 0), gates (>= 0): invalid", p.Ctx, p.Chunks, p.TextChunks)
		}
		for i, e := range p.Emulated {
			if err := e.validate(); err != nil {
				return Spec{}, fmt.Errorf("emulated[%d]: %w", i, err)
			}
		}
		out := []string{"screen.json"}
		if p.Routing {
			if p.Shape.Experts < 1 {
				return Spec{}, fmt.Errorf("shape: n_expert %d: routing counts the routing of an MoE model", p.Shape.Experts)
			}
			out = append(out, "routing.json")
		}
		return Spec{Inputs: []string{"model", "pack", "text"}, Outputs: out, PeakMemory: ScreenMemory(p.Shape, p.Ctx, p.EvalChunks(), p.Emulated)}, nil
	}, runScreen))
}

func runScreen(ctx context.Context, p ScreenParams, req Request) error {
	mpath, tpath := req.Inputs["model"].Path, req.Inputs["text"].Path
	label := p.TextName
	if label == "" {
		label = tpath
	}
	base, tok, gf, err := model.OpenGGUF(ctx, mpath, screenCache(p.Shape))
	if err != nil {
		return err
	}
	defer gf.Close()
	// Quantized and 16-bit matmul weights stay in their file encoding, as calibrate holds them: a
	// quarter to a half of the memory of float32, the same products (model.Encoded: bit for bit in the
	// pure-Go build, to float32 rounding under OpenBLAS). They are mappings of the model file, not heap
	// copies: each group of chunks (model.EvalGroupChunks) loads every layer again, and each layer is
	// released after the group ran through it.
	bs := base.Src.(*model.GGUFSource)
	bs.KeepEncoded, bs.MapEncoded = true, true
	text, err := os.ReadFile(tpath)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(string(text), true, false)
	if err != nil {
		return fmt.Errorf("tokenizing the screen text %s: %w", label, err)
	}
	eo := model.EvalOptions{Ctx: p.Ctx, MaxChunks: p.Chunks, BOS: model.NoToken}
	if tok.Vocab().AddBOS {
		eo.BOS = tok.Vocab().BOS
	}
	r, err := pack.Open(ctx, req.Inputs["pack"].Path)
	if err != nil {
		return err
	}
	defer r.Close()
	gs, ok := base.Src.(*model.GGUFSource)
	if !ok {
		return fmt.Errorf("model %s: no GGUF weight source", mpath)
	}
	ps, err := model.NewPackSource(gs, r)
	if err != nil {
		return err
	}
	// The node declared its memory for at most p.EvalChunks() chunks (the tokens an expert's Apply
	// takes and the hidden states of a group grow with them): a text that fills more is refused.
	chunks := model.EvalChunks(len(ids), p.Ctx, p.Chunks)
	if p.TextChunks > 0 && chunks > p.TextChunks {
		return fmt.Errorf("screen text %s: %d tokens fill %d chunks of %d, the node declares its memory for at most text_chunks %d", label, len(ids), chunks, p.Ctx, p.TextChunks)
	}
	// An entry's emulation scratch grows with its padded K, which a pack may pad to any rotation block
	// up to 2^24: refused before any entry is read when one Apply of it (a chunk; a routed expert's the
	// tokens of several chunks, model.Config.EvalExpertTokens, the pack's and the float model's chunks
	// run together) would take more than the node declares in all, as eval --pack refuses it past --mem.
	budget := ScreenMemory(p.Shape, p.Ctx, p.EvalChunks(), p.Emulated)
	if err := ps.CheckEmulationMemory(p.Ctx, base.Cfg.EvalExpertTokens(p.Ctx, 2, chunks), budget); err != nil {
		return fmt.Errorf("screen: pack %s at ctx %d, against the node's declared peak memory (ScreenMemory) of %d bytes: %w", req.Inputs["pack"].Path, p.Ctx, budget, err)
	}
	target, err := model.NewModel(base.Cfg, ps)
	if err != nil {
		return err
	}
	// One pass over the chunks runs both models: the float model's perplexity comes from the same
	// forward passes its KL divergence reads (EvalResult.BasePPL), not from a second evaluation.
	eo.Base = base
	var routes *calib.RouteCounter
	if p.Routing {
		routes = calib.NewRouteCounter(base.Cfg.NExpert, base.Cfg.NExpertUsed)
		eo.BaseObserver = routes
	}
	pr, err := model.Evaluate(ctx, target, ids, eo)
	if err != nil {
		return fmt.Errorf("screen text %s (%d tokens) at ctx %d: %w", label, len(ids), p.Ctx, err)
	}
	res := ScreenResult{Ctx: p.Ctx, Chunks: pr.Chunks, Tokens: pr.Tokens, Scored: pr.Scored, PPL: pr.PPL, PPLErr: pr.PPLErr,
		BasePPL: pr.BasePPL, BasePPLErr: pr.BasePPLErr, PPLRatio: pr.PPL / pr.BasePPL, KLD: pr.KLD, KLDPercentiles: pr.KLDPercentiles,
		Gates: ScreenGates{MaxPPLRatio: p.MaxPPLRatio, MaxKLDMean: p.MaxKLDMean}}
	if pr.KLD != nil {
		res.KLDMean = pr.KLD.Mean
	}
	if pr.SameTop != nil {
		res.SameTop, res.SameTopErr = *pr.SameTop, *pr.SameTopErr
	}
	var gateErrs []error
	if p.MaxPPLRatio > 0 && res.PPLRatio > p.MaxPPLRatio {
		gateErrs = append(gateErrs, fmt.Errorf("%w: max_ppl_ratio: pack PPL %.4f / float PPL %.4f = %.4f exceeds the threshold %g (text %s, ctx %d)",
			ErrGate, res.PPL, res.BasePPL, res.PPLRatio, p.MaxPPLRatio, label, p.Ctx))
	}
	if p.MaxKLDMean > 0 && res.KLDMean > p.MaxKLDMean {
		gateErrs = append(gateErrs, fmt.Errorf("%w: max_kld_mean: mean KL divergence %.6f exceeds the threshold %g (text %s, ctx %d)",
			ErrGate, res.KLDMean, p.MaxKLDMean, label, p.Ctx))
	}
	if err := errors.Join(gateErrs...); err != nil {
		return err
	}
	if routes != nil {
		held, err := routes.Routing()
		if err != nil {
			return fmt.Errorf("routing of the screen text %s: %w", label, err)
		}
		if err := writeRouting(req.Output("routing.json"), &held); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(req.Output("screen.json"), append(b, '\n'), 0o644)
}
