package stages

import (
	"context"
	"fmt"
	"os"

	"orkpipe/ork/calib"
	"orkpipe/ork/model"
)

// RoutingOutput is the calibrate output of an MoE model's window: how the window's MoE blocks routed the
// calibration tokens (calib.Routing in its routing.json form).
const RoutingOutput = "routing"

func writeRouting(path string, r *calib.Routing) error {
	if r == nil {
		return fmt.Errorf("routing %s: the forward pass recorded no routing (the model has no MoE block?)", path)
	}
	b, err := r.Marshal()
	if err != nil {
		return fmt.Errorf("routing %s: %w", path, err)
	}
	return os.WriteFile(path, b, 0o644)
}

// readRouting reads and validates a routing.json input.
func readRouting(f File) (calib.Routing, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return calib.Routing{}, err
	}
	return calib.ParseRouting(b, f.Path)
}

// RoutingParams are the parameters of "routing": the routing outputs of Windows calibrate windows, bound
// as inputs "w.0", "w.1", ... in window order, merged into "routing.json" (every MoE block once).
type RoutingParams struct {
	Windows int `json:"windows"`
}

// RouteParams are the parameters of "route": how the MoE blocks of the float model (input "model") route
// the tokens of a text (input "text", tokenized whole with BOS, cut into Chunks chunks of Ctx tokens, every
// chunk when 0, each chunk's first token replaced by BOS as llama-perplexity and screen do), written as
// "routing.json": the held-out routing a residency plan is scored against. MaxChunks bounds the chunks
// the text can give (its bytes, plus BOS, over Ctx: a token is at least one byte) for the memory estimate;
// the stage refuses a text that gives more.
type RouteParams struct {
	Shape     ModelShape `json:"shape"`
	Ctx       int        `json:"ctx"`
	Chunks    int        `json:"chunks"`
	MaxChunks int        `json:"max_chunks"`
	// TextName labels the text in messages (the file's base name; the stage sees a store path).
	TextName string `json:"text_name"`
}

// RouteMemory is the declared peak memory of a route node: calib.CountRoutingMemory (every chunk's hidden
// states, one block's weights as held, one batch's activations), plus the tokenizer and text (96 MiB).
func RouteMemory(s ModelShape, chunks, ctxLen int) int64 {
	c := s.Config()
	return 96<<20 + calib.CountRoutingMemory(&c, chunks, ctxLen)
}

func init() {
	Register(Define("routing", 1, func(p RoutingParams) (Spec, error) {
		if p.Windows < 1 || p.Windows > 1<<16 {
			return Spec{}, fmt.Errorf("windows %d: want 1..65536", p.Windows)
		}
		s := Spec{Outputs: []string{"routing.json"}, PeakMemory: 64<<20 + int64(p.Windows)<<20}
		for i := 0; i < p.Windows; i++ {
			s.Inputs = append(s.Inputs, fmt.Sprintf("w.%d", i))
		}
		return s, nil
	}, runRouting))
	Register(Define("route", 2, func(p RouteParams) (Spec, error) {
		if err := p.Shape.validate(); err != nil {
			return Spec{}, err
		}
		if p.Shape.Experts < 1 {
			return Spec{}, fmt.Errorf("shape: n_expert %d: route counts the routing of an MoE model", p.Shape.Experts)
		}
		if p.Ctx < 2 || p.Chunks < 0 || p.MaxChunks < 1 || p.Chunks > p.MaxChunks {
			return Spec{}, fmt.Errorf("ctx %d (>= 2), chunks %d (0 = all, at most max_chunks), max_chunks %d (>= 1): invalid", p.Ctx, p.Chunks, p.MaxChunks)
		}
		return Spec{Inputs: []string{"model", "text"}, Outputs: []string{"routing.json"}, PeakMemory: RouteMemory(p.Shape, p.MaxChunks, p.Ctx)}, nil
	}, runRoute))
}

func runRouting(ctx context.Context, p RoutingParams, req Request) error {
	parts := make([]calib.Routing, p.Windows)
	for i := range parts {
		r, err := readRouting(req.Inputs[fmt.Sprintf("w.%d", i)])
		if err != nil {
			return err
		}
		parts[i] = r
	}
	r, err := calib.MergeRouting(parts...)
	if err != nil {
		return err
	}
	if len(r.Layers) == 0 {
		return fmt.Errorf("routing: the %d windows hold no MoE block", p.Windows)
	}
	return writeRouting(req.Output("routing.json"), &r)
}

func runRoute(ctx context.Context, p RouteParams, req Request) error {
	mpath, tpath := req.Inputs["model"].Path, req.Inputs["text"].Path
	label := p.TextName
	if label == "" {
		label = tpath
	}
	m, tok, gf, err := model.OpenGGUF(ctx, mpath, 0)
	if err != nil {
		return err
	}
	defer gf.Close()
	if err := p.Shape.checkModel(mpath, m.Cfg); err != nil {
		return err
	}
	// As calibrate holds them, the same bits: encoded, mapped from the model file (CountRouting
	// releases each layer once it has run).
	gs := m.Src.(*model.GGUFSource)
	gs.KeepEncoded, gs.MapEncoded = true, true
	text, err := os.ReadFile(tpath)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(string(text), true, false)
	if err != nil {
		return fmt.Errorf("tokenizing %s: %w", label, err)
	}
	n := len(ids) / p.Ctx
	if p.Chunks > 0 {
		n = min(n, p.Chunks)
	}
	switch {
	case n == 0:
		return fmt.Errorf("text %s: %d tokens, fewer than one chunk of %d", label, len(ids), p.Ctx)
	case n > p.MaxChunks:
		return fmt.Errorf("text %s: %d chunks of %d tokens, more than the %d the plan sized memory for", label, n, p.Ctx, p.MaxChunks)
	}
	seqs := make([][]int32, n)
	for i := range seqs {
		seqs[i] = append([]int32(nil), ids[i*p.Ctx:(i+1)*p.Ctx]...)
		if v := tok.Vocab(); v.AddBOS {
			seqs[i][0] = v.BOS
		}
	}
	r, err := calib.CountRouting(ctx, m, seqs)
	if err != nil {
		return fmt.Errorf("routing of %s (%d chunks of %d): %w", label, n, p.Ctx, err)
	}
	return writeRouting(req.Output("routing.json"), &r)
}
