package build

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// Graph implements engine.Target: it reads the source model's header (or the synthetic shape),
// applies the schemes, checks that the board can hold the pack (checkBoardFit), sizes the calibration
// windows and returns the build graph. Every problem found here is an error wrapping ErrPlan that names
// the field, file, weight or window; nothing runs before the whole graph is planned.
func (t *Target) Graph(ctx context.Context) (*engine.Graph, error) {
	if t.speeds != nil {
		s, err := t.speeds(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		t.costs.speed = s
	}
	g := engine.NewGraph()
	src, err := t.planSource(ctx, g)
	if err != nil {
		return nil, err
	}
	ws, err := t.selectWeights(src)
	if err != nil {
		return nil, err
	}
	prof, err := t.profile()
	if err != nil {
		return nil, err
	}
	if _, err := checkBoardFit(ws, prof, t.r.Residency); err != nil {
		return nil, err
	}
	if err := t.planActClips(src, ws); err != nil {
		return nil, err
	}
	needCalib := t.r.Residency != nil // the routing statistics come from calibration
	for _, w := range ws {
		needCalib = needCalib || w.fin.Method == "gptq" || w.clip != nil
	}
	// An RTN weight whose finalized form nothing but its tile reads is quantized and tiled by one
	// rtn-tile node: no activation clip search after it, and no propagate reading it (sequential
	// calibration propagates through every weight of a window; a promoted twin is never propagated).
	propagates := needCalib && t.r.Calibration.Mode != "oneshot"
	for _, w := range ws {
		w.fused = w.fin.Method == "rtn" && w.clip == nil && !propagates
		w.pfused = w.promote != nil && w.promote.Method == "rtn" && w.pclip == nil
	}
	if err := t.checkWeightMemory(ws); err != nil {
		return nil, err
	}
	if err := t.checkImatrix(ctx, ws); err != nil {
		return nil, err
	}
	boardName, boardFile, err := t.boardInput()
	if err != nil {
		return nil, err
	}
	// The inputs of a finalize (rtn-tile) node that reads no Hessian and no activations are the same
	// for every weight (the model, and the imatrix when it weights the weight): one map of each kind,
	// shared (engine.Graph.Add never modifies it).
	var shared [2]map[string]engine.Input // [0] the model, [1] the model and the imatrix
	finalIn := func(p *stages.FinalizeParams, hessian, acts *engine.Input) map[string]engine.Input {
		perWeight, kind := p.Method == "gptq" || p.GPTQInputs != "", 0
		if p.Importance == "imatrix" {
			kind = 1
		}
		if !perWeight && shared[kind] != nil {
			return shared[kind]
		}
		in := map[string]engine.Input{"model": src.in}
		if p.Method == "gptq" {
			in["hessian"] = *hessian
		}
		if p.GPTQInputs != "" {
			in["acts"] = *acts
		}
		if p.Importance == "imatrix" {
			in["imatrix"] = engine.File(t.r.Imatrix)
		}
		if !perWeight {
			shared[kind] = in
		}
		return in
	}
	// addFinal adds the finalize nodes of a weight (and of its promoted twin); a fused one gets its
	// rtn-tile node here, and its tiled entry is then final.
	addFinal := func(w *weight, hessian, acts *engine.Input) {
		if w.fused {
			w.tiled = g.Add("rtn-tile:"+w.name, "rtn-tile", stages.RTNTileParams{Finalize: w.fin, Nibbles: "low-first"},
				finalIn(&w.fin, hessian, acts)).Cost(t.costs.rtnTile(w.fin)).Writes(w.fin.TiledBytes()).Output("entry")
		} else {
			w.final = g.Add("finalize:"+w.name, "finalize", w.fin, finalIn(&w.fin, hessian, acts)).
				Cost(t.costs.finalize(w.fin)).Writes(w.fin.OutputBytes()).Output("weight")
		}
		if p := w.promote; p != nil && w.pfused {
			w.ptiled = g.Add("rtn-tile-promote:"+w.name, "rtn-tile", stages.RTNTileParams{Finalize: *p, Nibbles: "low-first"},
				finalIn(p, hessian, acts)).Cost(t.costs.rtnTile(*p)).Writes(p.TiledBytes()).Output("entry")
		} else if p != nil {
			w.pfinal = g.Add("finalize-promote:"+w.name, "finalize", *p, finalIn(p, hessian, acts)).
				Cost(t.costs.finalize(*p)).Writes(p.OutputBytes()).Output("weight")
		}
	}
	// addTail adds what follows finalize: the activation clip search on the calibrate output acts (when
	// the weight has one; w.final becomes its output) and the tile nodes.
	addTail := func(w *weight, acts *engine.Input) {
		if w.clip != nil {
			w.final = g.Add("act-clip:"+w.name, "act-clip", *w.clip, map[string]engine.Input{"model": src.in, "weight": w.final, "acts": *acts}).
				Cost(t.costs.actClip(*w.clip)).Writes(w.fin.OutputBytes()).Output("weight")
		}
		if !w.fused {
			tl := g.Add("tile:"+w.name, "tile", stages.TileParams{Nibbles: "low-first", N: w.fin.N, KP: w.fin.KP()},
				map[string]engine.Input{"weight": w.final}).Cost(t.costs.tile(w.fin.N, w.fin.KP())).Writes(w.fin.TiledBytes())
			w.tiled = tl.Output("entry")
		}
		if p := w.promote; p != nil && !w.pfused {
			if w.pclip != nil {
				w.pfinal = g.Add("act-clip-promote:"+w.name, "act-clip", *w.pclip, map[string]engine.Input{"model": src.in, "weight": w.pfinal, "acts": *acts}).
					Cost(t.costs.actClip(*w.pclip)).Writes(p.OutputBytes()).Output("weight")
			}
			pt := g.Add("tile-promote:"+w.name, "tile", stages.TileParams{Nibbles: "low-first", N: p.N, KP: p.KP()},
				map[string]engine.Input{"weight": w.pfinal}).Cost(t.costs.tile(p.N, p.KP())).Writes(p.TiledBytes())
			w.ptiled = pt.Output("entry")
		}
	}
	// Weights that need no calibration first: sequential propagation may consume them.
	for _, w := range ws {
		if w.fin.Method != "gptq" {
			addFinal(w, nil, nil)
			if w.clip == nil {
				addTail(w, nil)
			}
		}
	}
	var routing *engine.Input
	if needCalib {
		if routing, err = t.planCalibration(g, src, ws, addFinal, addTail); err != nil {
			return nil, err
		}
	}
	return t.planTail(g, src, ws, routing, boardName, boardFile)
}

// planCalibration adds tokenize, the calibrate (and, sequentially, propagate) nodes of every window,
// the GPTQ weights of each window after its calibrate node, and the activation clip searches of the
// window's weights on its activation samples. For an MoE model it also adds the routing node merging the
// windows' routing statistics, and returns its routing.json (nil for a dense model).
func (t *Target) planCalibration(g *engine.Graph, src *source, ws []*weight, addFinal func(*weight, *engine.Input, *engine.Input), addTail func(*weight, *engine.Input)) (*engine.Input, error) {
	c := t.r.Calibration
	if err := checkFile("calibration.corpus", c.Corpus); err != nil {
		return nil, err
	}
	skip := unreadHessians(src.shape, ws)
	wins, err := t.windows(src.shape, skip, windowWeights(ws))
	if err != nil {
		return nil, err
	}
	var routes []engine.Input
	tp := stages.TokenizeParams{Sequences: c.Sequences, Ctx: c.Ctx, CorpusName: filepath.Base(c.Corpus)}
	tok := g.Add("tokenize", "tokenize", tp, map[string]engine.Input{"model": src.in, "corpus": engine.File(c.Corpus)}).Cost(t.costs.tokenize(tp)).Writes(tp.OutputBytes())
	prev := tok.Output("tokens")
	oneshot := c.Mode == "oneshot"
	for _, win := range wins {
		a, b := win[0], win[1]
		id := fmt.Sprintf("[%d,%d)", a, b)
		in := map[string]engine.Input{"model": src.in}
		if a == 0 {
			in["tokens"] = prev
		} else {
			in["hidden"] = prev
		}
		cp := stages.CalibrateParams{Shape: src.shape, Start: a, End: b, Sequences: c.Sequences,
			Ctx: c.Ctx, Hidden: oneshot && b < src.shape.Layers, ActSample: c.ActSample, Skip: skip(a, b)}
		cal := g.Add("calibrate"+id, "calibrate", cp, in).Cost(t.costs.calibrate(cp)).Writes(cp.OutputBytes())
		if src.shape.Experts > 0 {
			routes = append(routes, cal.Output(stages.RoutingOutput))
		}
		var window []*weight
		for _, w := range ws {
			if w.layer >= a && w.layer < b {
				window = append(window, w)
				var acts *engine.Input
				if w.acts != "" {
					a := cal.Output(w.acts)
					acts = &a
				}
				if w.fin.Method == "gptq" {
					h := cal.Output(w.hessianOutput(src.shape))
					addFinal(w, &h, acts)
				}
				if w.clip != nil {
					addTail(w, acts)
				} else if w.fin.Method == "gptq" {
					addTail(w, nil)
				}
			}
		}
		if b == src.shape.Layers {
			break
		}
		if oneshot {
			prev = cal.Output("hidden")
			continue
		}
		pp := stages.PropagateParams{Shape: src.shape, Start: a, End: b, Sequences: c.Sequences, Ctx: c.Ctx}
		pin := map[string]engine.Input{"model": src.in}
		for k, v := range in {
			pin[k] = v
		}
		for _, w := range window {
			pp.Weights = append(pp.Weights, w.windowWeight())
			pin["w."+w.name] = w.final
		}
		prev = g.Add("propagate"+id, "propagate", pp, pin).Cost(t.costs.propagate(pp)).Writes(pp.OutputBytes()).Output("hidden")
	}
	return planRouting(g, routes), nil
}

// planTail adds write-orkpack, emit-stub, screen, verify-local, report and provenance, and the exports.
func (t *Target) planTail(g *engine.Graph, src *source, ws []*weight, routing *engine.Input, boardName string, boardFile *engine.Input) (*engine.Graph, error) {
	r := t.r
	wp := stages.WritePackParams{Board: boardName}
	win := map[string]engine.Input{}
	if boardFile != nil {
		win["board"] = *boardFile
	}
	var cands []string
	for _, w := range ws {
		wp.Entries = append(wp.Entries, w.name)
		win["e."+w.name] = w.tiled
		rotated, err := stages.PaddedK(w.fin.K, "hadamard") // K, or K padded by a rotation of the smallest block
		if err != nil {
			return nil, fmt.Errorf("%w: weight %s: write-orkpack max_entry_bytes: %w", ErrPlan, w.name, err)
		}
		kp := int64(max(rotated, w.fin.KP()))
		if w.promote != nil {
			kp = max(kp, int64(w.promote.KP()))
		}
		wp.MaxEntryBytes = max(wp.MaxEntryBytes, int64(w.fin.N+64)*(kp+32)+int64(w.fin.N)*(kp/32+1)*4)
		if w.promote != nil {
			cands = append(cands, w.name)
			win["p."+w.name] = w.ptiled
		}
	}
	if len(cands) > 0 {
		wp.Promote = &stages.PromoteParams{Candidates: cands, BudgetBytes: int64(r.Promote.BudgetMiB * (1 << 20))}
	}
	moe, err := t.planResidency(g, ws, routing, boardName, boardFile)
	if err != nil {
		return nil, err
	}
	if moe.residency != nil {
		wp.Residency = true
		win["residency"] = *moe.residency
	}
	srcBytes, packSize := sourceBytes(src), packBytes(ws)
	pk := g.Add("write-orkpack", "write-orkpack", wp, win).Cost(cost(costPackPerByte, packSize)).Writes(packSize + promoteBytes(wp)).Output("pack")
	var owned []string // pack.OwnedTensors of the entries: the tensors (an expert tensor whole)
	for _, w := range ws {
		owned = append(owned, w.tensor)
	}
	slices.Sort(owned)
	owned = slices.Compact(owned)
	stub := g.Add("emit-stub", "emit-stub", stages.EmitStubParams{Owned: owned}, map[string]engine.Input{"model": src.in}).
		Cost(cost(costStubPerByte, srcBytes)).Writes(stubBytes(src, owned)).Output("stub.gguf")
	vin := map[string]engine.Input{"model": src.in, "pack": pk, "stub": stub}
	if boardFile != nil {
		vin["board"] = *boardFile
	}
	ver := g.Add("verify-local", "verify-local", stages.VerifyLocalParams{Board: boardName, MaxEntryBytes: wp.MaxEntryBytes}, vin).
		Cost(cost(costVerifyPerByte, packSize)).Output("verify.json")
	rin := map[string]engine.Input{"pack": pk, "stub": stub, "verify": ver}
	deps := []stages.ProvenanceDep{{Name: "source-model", URI: src.uri}}
	pin := map[string]engine.Input{"dep.source-model": src.in}
	if r.Path != "" {
		deps = append(deps, stages.ProvenanceDep{Name: "recipe", URI: "file://" + r.Path})
		pin["dep.recipe"] = engine.File(r.Path)
	}
	if s := r.Screen; s != nil {
		if err := checkFile("screen.text", s.Text); err != nil {
			return nil, err
		}
		// A token spells at least one byte of the text (BOS and SentencePiece's prefix space aside):
		// a text smaller than that cannot fill one chunk, which screen would find only at the build's end.
		st, err := statFile(s.Text)
		if err == nil && int64(s.Ctx) > st.Size()+2 {
			return nil, fmt.Errorf("%w: screen.ctx %d: screen.text %s is %d bytes, at most %d tokens: fewer than one chunk of %d",
				ErrPlan, s.Ctx, s.Text, st.Size(), st.Size()+2, s.Ctx)
		}
		sp := stages.ScreenParams{Shape: src.shape, Ctx: s.Ctx, Chunks: s.Chunks,
			MaxPPLRatio: s.Gates.MaxPPLRatio, MaxKLDMean: s.Gates.MaxKLDMean, TextName: filepath.Base(s.Text)}
		if err == nil { // the most chunks the text fills: the screen declares its memory for them
			sp.TextChunks = int(min((st.Size()+2)/int64(s.Ctx), math.MaxInt32))
		}
		var es []stages.EmulatedEntry // every entry the pack may hold: the finalized weights and their promotions
		for _, w := range ws {
			es = append(es, w.fin.Emulated(w.name))
			if w.promote != nil {
				es = append(es, w.promote.Emulated(w.name))
			}
		}
		sp.Emulated = stages.EmulatedEntries(es)
		moe.heldOutFromScreen(&sp, s.Text)
		sc := g.Add("screen", "screen", sp, map[string]engine.Input{"model": src.in, "pack": pk, "text": engine.File(s.Text)}).Cost(t.costs.screen(sp, s.Text))
		moe.screenNode(sc)
		rin["screen"] = sc.Output("screen.json")
		deps = append(deps, stages.ProvenanceDep{Name: "screen-text", URI: "file://" + s.Text})
		pin["dep.screen-text"] = engine.File(s.Text)
	}
	if g.Node("tokenize") != nil {
		deps = append(deps, stages.ProvenanceDep{Name: "corpus", URI: "file://" + r.Calibration.Corpus})
		pin["dep.corpus"] = engine.File(r.Calibration.Corpus)
	}
	for _, w := range ws {
		if w.fin.Importance == "imatrix" || w.promote != nil && w.promote.Importance == "imatrix" {
			deps = append(deps, stages.ProvenanceDep{Name: "imatrix", URI: "file://" + r.Imatrix})
			pin["dep.imatrix"] = engine.File(r.Imatrix)
			break
		}
	}
	if boardFile != nil {
		deps = append(deps, stages.ProvenanceDep{Name: "board-profile", URI: "file://" + r.Board})
		pin["dep.board-profile"] = *boardFile
	}
	model := provenanceModel(src.meta, ws, boardName)
	rp := stages.ReportParams{Name: r.Name, Screen: r.Screen != nil, Board: boardName, Deps: deps, Overrides: t.overrides, Model: model,
		NextN: nextNReport(src)}
	if boardFile != nil {
		rin["board"] = *boardFile
	}
	for name, in := range pin { // the dependencies, as provenance binds them
		if strings.HasPrefix(name, "dep.") {
			rin[name] = in
		}
	}
	for _, w := range ws {
		if w.promote != nil {
			if rp.PromoteFrom == nil {
				rp.PromoteFrom = map[string]string{}
			}
			rp.PromoteFrom[w.name] = w.fin.DType
		}
	}
	moe.bind(&rp, rin)
	rep := g.Add("report", "report", rp, rin).Cost(nodeStartNS)
	out := t.Exports()
	pin["subject."+out.Pack] = pk
	pin["subject."+out.Stub] = stub
	pin["subject."+out.Report] = rep.Output("report.json")
	pin["subject."+out.Summary] = rep.Output("summary.txt")
	pin["subject."+out.HTML] = rep.Output("report.html")
	subjects := []string{out.Pack, out.Stub, out.Report, out.Summary, out.HTML}
	for _, x := range moe.exports() {
		pin["subject."+x.name] = x.in
		subjects = append(subjects, x.name)
		g.Export(x.name, x.in)
	}
	recipeJSON, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	// The stub's and the pack's sha256 come from nodes of their own, each started as soon as its
	// file exists and a job slot is free, beside the nodes that read it (verify-local waits for
	// neither). Their costs put emit-stub, with the stub's long sha256 after it, before the weights.
	pin["sha256."+out.Stub] = g.Add("sha256:"+out.Stub, "sha256", stages.SHA256Params{}, map[string]engine.Input{"file": stub}).
		Cost(cost(costSHA256PerByte, srcBytes)).Output("sha256.json")
	pin["sha256."+out.Pack] = g.Add("sha256:"+out.Pack, "sha256", stages.SHA256Params{}, map[string]engine.Input{"file": pk}).
		Cost(cost(costSHA256PerByte, packSize)).Output("sha256.json")
	prov := g.Add("provenance", "provenance", stages.ProvenanceParams{Name: r.Name,
		Subjects: subjects, Deps: deps, Recipe: recipeJSON, Overrides: t.overrides, SHA256: []string{out.Pack, out.Stub},
		Model: model}, pin).Cost(nodeStartNS)
	g.Export(out.Pack, pk)
	g.Export(out.Stub, stub)
	g.Export(out.Report, rep.Output("report.json"))
	g.Export(out.Summary, rep.Output("summary.txt"))
	g.Export(out.HTML, rep.Output("report.html"))
	g.Export(out.Provenance, prov.Output("provenance.json"))
	if err := t.planBoardVerify(g, pk, stub); err != nil {
		return nil, err
	}
	return g, g.Err()
}
