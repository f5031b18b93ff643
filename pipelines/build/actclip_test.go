package build_test

import (
	"context"
	"errors"
	"hash/fnv"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/ork/pack"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
)

// planStatus plans the recipe with the overrides and returns every node's status by id.
func planStatus(t *testing.T, r *rig, path string, sets ...string) (map[string]engine.NodeStatus, error) {
	t.Helper()
	rec, err := recipe.Load(path, sets...)
	if err != nil {
		return nil, err
	}
	tg, err := build.New(rec, build.WithMemoryBudget(2<<30))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tg.Graph(context.Background())
	if err != nil {
		return nil, err
	}
	plan, err := r.eng.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.eng.Status(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]engine.NodeStatus{}
	for _, s := range st {
		out[s.ID] = s
	}
	return out, nil
}

// TestActClipPlan: with act_clip: search, every calibrate node keeps activation samples, each searched
// weight has an act-clip node after its finalize node and its window's calibrate node, and its tile node
// and the sequential propagate node read the act-clip node's weight; a fixed act_clip is a finalize
// parameter and adds no node; an MoE expert slice cannot search.
func TestActClipPlan(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "sequential")
	st, err := planStatus(t, r, path, "schemes.0.act_clip=search", "schemes.1.act_clip=0.9")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"0", "1"} {
		w := "blk." + l + ".ffn_down.weight"
		ac, ok := st["act-clip:"+w]
		win := "calibrate[" + l + "," + string(rune('1'+l[0]-'0')) + ")"
		if !ok || !slices.Contains(ac.Deps, "finalize:"+w) || !slices.Contains(ac.Deps, win) {
			t.Fatalf("act-clip:%s: %+v (want deps finalize and %s)", w, ac, win)
		}
		if !slices.Contains(st["tile:"+w].Deps, "act-clip:"+w) || slices.Contains(st["tile:"+w].Deps, "finalize:"+w) {
			t.Errorf("tile:%s reads %v, want the act-clip node only", w, st["tile:"+w].Deps)
		}
		if _, ok := st["act-clip:blk."+l+".attn_q.weight"]; ok {
			t.Errorf("a fixed act_clip planned an act-clip node")
		}
	}
	if p := st["propagate[0,1)"]; !slices.Contains(p.Deps, "act-clip:blk.0.ffn_down.weight") || slices.Contains(p.Deps, "finalize:blk.0.ffn_down.weight") {
		t.Errorf("propagate[0,1) reads %v, want the searched weight's act-clip node", p.Deps)
	}
	// Without act_clip the plan has no act-clip node.
	st, err = planStatus(t, r, path)
	if err != nil {
		t.Fatal(err)
	}
	for id, s := range st {
		if s.Stage == "act-clip" {
			t.Errorf("plan without act_clip has %s", id)
		}
	}

	moe := writeMoERecipe(t)
	_, err = planStatus(t, r, moe, "schemes.0.act_clip=search", "calibration.corpus="+abs(t, "../recipes/demo-corpus.txt"),
		"calibration.sequences=2", "calibration.ctx=16")
	if !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), "blk.0.ffn_gate_exps.weight#0: act_clip: search needs the activation sample") {
		t.Errorf("MoE expert slice with act_clip search: %v", err)
	}
	_, err = planStatus(t, r, moe, "schemes.0.act_clip=search")
	if !errors.Is(err, recipe.ErrInvalid) || !strings.Contains(err.Error(), "required because a scheme uses act_clip: search") {
		t.Errorf("act_clip search without calibration: %v", err)
	}
}

// TestActClipRebuild: a build with searched clips (the int4-activation weights) and a fixed one
// (ffn_down) records them in the pack (the report shows them, the fixed one exactly); calibrate holds
// act_sample and the fixed clip is a finalize parameter; changing the search grid re-runs every search
// and, for the weights whose clip changed, what follows, never calibration or GPTQ.
func TestActClipRebuild(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "oneshot")
	out := filepath.Join(t.TempDir(), "out")
	sets := []string{"schemes.0.act_clip=0.9", "schemes.1.act_clip=search"}
	if _, _, err := r.build(t, path, out, sets...); err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	searched := 0
	for _, w := range rep.Weights {
		switch {
		case strings.HasSuffix(w.Name, "ffn_down.weight"):
			if w.ActClip != float32(0.9) {
				t.Errorf("%s: clip %v, want the fixed 0.9", w.Name, w.ActClip)
			}
		case !(w.ActClip > 0 && w.ActClip <= 1):
			t.Errorf("%s: searched clip %v", w.Name, w.ActClip)
		case w.ActClip < 1:
			searched++
		}
	}
	if searched < 6 {
		t.Errorf("%d of the 12 int4-activation weights chose a clip below 1: %+v", searched, rep.Weights)
	}
	st, err := planStatus(t, r, path, sets...)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"calibrate[0,1)": `"act_sample":1024`, "finalize:blk.0.ffn_down.weight": `"act_clip":0.9`} {
		if m := st[id].Material; m == nil || !strings.Contains(string(m.Params), want) {
			t.Errorf("%s: params %+v, want %s", id, m, want)
		}
	}
	if m := st["finalize:blk.0.attn_q.weight"].Material; m == nil || strings.Contains(string(m.Params), "act_clip") {
		t.Errorf("finalize of a searched weight holds a clip: %+v", m)
	}
	ran, _, err := r.build(t, path, filepath.Join(t.TempDir(), "out"), append(sets, "schemes.1.act_clip_grid=[1, 0.95, 0.9]")...)
	if err != nil {
		t.Fatal(err)
	}
	searches := 0
	for _, id := range ran {
		switch {
		case strings.HasPrefix(id, "act-clip:"):
			searches++
		case strings.HasPrefix(id, "tile:") && !strings.Contains(id, "ffn_down"):
		case slices.Contains([]string{"write-orkpack", "sha256:tiny.orkpack", "screen", "verify-local", "report", "provenance"}, id):
		default:
			t.Errorf("grid change re-ran %s", id)
		}
	}
	if searches != 12 || len(ran) <= searches+1 {
		t.Errorf("grid change re-ran %v: want the 12 searches, the tiles of the weights whose clip changed and the tail", ran)
	}
}

// TestRotationSiteAndBlock: rotation_seed: site gives the weights reading one activation row (attn_q,
// attn_k, attn_v; ffn_gate, ffn_up) one rotation, different per site and layer; rotation_block pads
// ffn_down's K = 96 (blocks of 32) to one block of 128, which the pack records and the screen emulates.
func TestRotationSiteAndBlock(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "oneshot")
	out := filepath.Join(t.TempDir(), "out")
	if _, _, err := r.build(t, path, out, "schemes.1.rotation_seed=site", "schemes.0.rotation_block=128"); err != nil {
		t.Fatal(err)
	}
	p, err := pack.Open(context.Background(), filepath.Join(out, "tiny.orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	seed := func(name string) uint64 {
		e, err := p.Entry(name)
		if err != nil {
			t.Fatal(err)
		}
		return e.Rotation.Seed
	}
	for _, l := range []string{"0", "1"} {
		b := "blk." + l + "."
		if q, k, v := seed(b+"attn_q.weight"), seed(b+"attn_k.weight"), seed(b+"attn_v.weight"); q != k || q != v {
			t.Errorf("layer %s: attn_q/k/v seeds %d %d %d, want one", l, q, k, v)
		}
		if seed(b+"ffn_gate.weight") != seed(b+"ffn_up.weight") || seed(b+"ffn_gate.weight") == seed(b+"attn_q.weight") ||
			seed(b+"attn_output.weight") == seed(b+"attn_q.weight") {
			t.Errorf("layer %s: site seeds not shared within, or shared across, sites", l)
		}
		e, err := p.Entry(b + "ffn_down.weight")
		if err != nil || e.K != 128 || e.Rotation.Block != 128 {
			t.Errorf("%sffn_down.weight: K %d block %d (%v), want one block of 128", b, e.K, e.Rotation.Block, err)
		}
	}
	if seed("blk.0.attn_q.weight") == seed("blk.1.attn_q.weight") {
		t.Error("the attention sites of two layers share a seed")
	}
	if rep := readReport(t, out); rep.Screen == nil || !(rep.Screen.KLDMean > 0) || rep.Screen.KLDMean > 1 {
		t.Errorf("screen of the padded pack: %+v", rep.Screen)
	}
}

// TestRotationSalt: rotation_salt is written before the name every rotated weight's sign seed derives
// from (FNV-1a), its own name or, under rotation_seed: site, its site's, so a salt is another sign set
// for every weight of its scheme, and the pack records those seeds.
func TestRotationSalt(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "oneshot")
	out := filepath.Join(t.TempDir(), "out")
	if _, _, err := r.build(t, path, out, "schemes.0.rotation_salt=s1-", "schemes.1.rotation_seed=site", "schemes.1.rotation_salt=s1-"); err != nil {
		t.Fatal(err)
	}
	p, err := pack.Open(context.Background(), filepath.Join(out, "tiny.orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fnv1a := func(s string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(s))
		return h.Sum64()
	}
	for _, l := range []string{"0", "1"} {
		b := "blk." + l + "."
		for name, seedName := range map[string]string{
			b + "ffn_down.weight": b + "ffn_down.weight",
			b + "attn_q.weight":   b + "attn_qkv", b + "attn_k.weight": b + "attn_qkv", b + "attn_v.weight": b + "attn_qkv",
			b + "ffn_gate.weight": b + "ffn_gate_up", b + "ffn_up.weight": b + "ffn_gate_up",
		} {
			e, err := p.Entry(name)
			if err != nil {
				t.Fatal(err)
			}
			if want := fnv1a("s1-" + seedName); e.Rotation.Seed != want || e.Rotation.Seed == fnv1a(seedName) {
				t.Errorf("%s: seed %d, want %d (FNV-1a of %q; unsalted %d)", name, e.Rotation.Seed, want, "s1-"+seedName, fnv1a(seedName))
			}
		}
	}
}

// TestGPTQInputsBuild: gptq_inputs makes calibrate keep activation samples and binds the site's sample to
// the weight's finalize node (its parameters name the target, the sample size and, with act_clip: search,
// the clip grid); the build runs and its pack differs from plain GPTQ's; a sample smaller than a stored row
// is a plan error naming the weight.
func TestGPTQInputsBuild(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "sequential")
	sets := []string{"schemes.0.gptq_inputs=quantized", "schemes.1.gptq_inputs=asymmetric", "schemes.1.act_clip=search"}
	outQ, outP := filepath.Join(t.TempDir(), "q"), filepath.Join(t.TempDir(), "p")
	if _, _, err := r.build(t, path, outQ, sets...); err != nil {
		t.Fatal(err)
	}
	st, err := planStatus(t, r, path, sets...)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string][]string{
		"calibrate[0,1)":                 {`"act_sample":1024`},
		"finalize:blk.0.ffn_down.weight": {`"gptq_inputs":"quantized"`, `"input_rows":1024`},
		"finalize:blk.1.attn_q.weight":   {`"gptq_inputs":"asymmetric"`, `"input_clip_grid":[1,0.975`, `"input_rows":1024`},
	} {
		m := st[id].Material
		if m == nil {
			t.Fatalf("%s: not planned", id)
		}
		for _, w := range want {
			if !strings.Contains(string(m.Params), w) {
				t.Errorf("%s: params %s, want %s", id, m.Params, w)
			}
		}
		if _, ok := m.Inputs["acts"]; strings.HasPrefix(id, "finalize:") && !ok {
			t.Errorf("%s: inputs %v, want the activation sample", id, m.Inputs)
		}
	}
	if m := st["finalize:blk.0.ffn_down.weight"].Material; strings.Contains(string(m.Params), "input_clip_grid") {
		t.Errorf("ffn_down (no clip search) has a clip grid: %s", m.Params)
	}
	if _, _, err := r.build(t, path, outP, "schemes.1.act_clip=search"); err != nil {
		t.Fatal(err)
	}
	a, b := readReport(t, outQ), readReport(t, outP)
	if a.Pack.Digest == b.Pack.Digest {
		t.Errorf("gptq_inputs left the pack as plain GPTQ's (%s)", a.Pack.Digest)
	}
	_, err = planStatus(t, r, path, append(sets, "calibration.act_sample=16")...)
	if !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), "blk.0.ffn_down.weight: gptq_inputs quantized needs an activation sample of at least 96 rows") {
		t.Errorf("act_sample 16: %v", err)
	}
}
