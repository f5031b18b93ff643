package stages_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/ork/board"
	"orkpipe/ork/calib"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
	"orkpipe/stages"
)

// moeCalSynth is the MoE model of these tests: 2 layers, n_embd 64, 4 experts of n_ff 96, top-2.
const (
	moeCalSynth = `{"layers":2,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"vocab":360,"ctx":64,"type":"F32","seed":23,"n_expert":4,"n_expert_used":2}`
	moeCalShape = `{"layers":2,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"head_dim":16,"vocab":360,"n_expert":4,"n_expert_used":2}`
)

func mustExec(t *testing.T, stage, params string, inputs map[string]string) map[string]string {
	t.Helper()
	out, err := runStage(t, stage, params, inputs)
	if err != nil {
		t.Fatalf("%s: %v", stage, err)
	}
	return out
}

// moeCalibration synthesizes the MoE model and tokenizes 3 sequences of 16 tokens.
func moeCalibration(t *testing.T) (modelPath, tokens string) {
	t.Helper()
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(corpus, []byte(fingerprintText), 0o644); err != nil {
		t.Fatal(err)
	}
	modelPath = mustExec(t, "synth", moeCalSynth, nil)["model.gguf"]
	tokens = mustExec(t, "tokenize", `{"sequences":3,"ctx":16,"corpus_name":"corpus.txt"}`, map[string]string{"model": modelPath, "corpus": corpus})["tokens"]
	return modelPath, tokens
}

func TestHessianOutput(t *testing.T) {
	var moe, dense stages.ModelShape
	if err := json.Unmarshal([]byte(moeCalShape), &moe); err != nil {
		t.Fatal(err)
	}
	dense = moe
	dense.Experts, dense.ExpertsUsed = 0, 0
	for _, tc := range []struct {
		shape  stages.ModelShape
		weight string
		name   string
		layer  int
		ok     bool
	}{
		{moe, "blk.1.ffn_up_exps.weight#2", "h.1.ffn_gate_up_exps.2", 1, true},
		{moe, "blk.1.ffn_gate_exps.weight#0", "h.1.ffn_gate_up_exps.0", 1, true},
		{moe, "blk.0.ffn_down_exps.weight#3", "h.0.ffn_down_exps.3", 0, true},
		{moe, "blk.0.attn_k.weight", "h.0.attn_qkv", 0, true},
		{moe, "blk.0.attn_output.weight", "h.0.attn_output", 0, true},
		{moe, "blk.0.ffn_up_exps.weight#4", "", 0, false}, // 4 experts
		{moe, "blk.0.ffn_up_exps.weight", "", 0, false},   // the whole expert tensor
		{moe, "blk.0.ffn_up.weight", "", 0, false},
		{moe, "blk.0.ffn_gate_inp.weight", "", 0, false}, // the router stays float
		{moe, "blk.2.attn_q.weight", "", 0, false},       // 2 layers
		{dense, "blk.1.ffn_up.weight", "h.1.ffn_gate_up", 1, true},
		{dense, "blk.1.ffn_down.weight", "h.1.ffn_down", 1, true},
		{dense, "blk.1.attn_q.weight", "h.1.attn_qkv", 1, true},
		{dense, "blk.0.ffn_up_exps.weight#0", "", 0, false},
		{dense, "blk.01.ffn_up.weight", "", 0, false},
		{dense, "blk.1.ffn_up", "", 0, false},
		{dense, "output.weight", "", 0, false},
	} {
		name, layer, ok := stages.HessianOutput(tc.shape, tc.weight)
		if name != tc.name || layer != tc.layer || ok != tc.ok {
			t.Errorf("HessianOutput(%q) = %q, %d, %v; want %q, %d, %v", tc.weight, name, layer, ok, tc.name, tc.layer, tc.ok)
		}
	}
}

// TestCalibrateMoE runs calibrate over both layers of an MoE model in two windows: the outputs are the
// attention Hessians and two per expert (named as HessianOutput says), the expert token counts of
// each layer add up to tokens × top-k, and every file equals what calib.Capture computes directly.
func TestCalibrateMoE(t *testing.T) {
	modelPath, tokens := moeCalibration(t)
	w0 := mustExec(t, "calibrate", `{"shape":`+moeCalShape+`,"start":0,"end":1,"sequences":3,"ctx":16,"hidden":true}`,
		map[string]string{"model": modelPath, "tokens": tokens})
	w1 := mustExec(t, "calibrate", `{"shape":`+moeCalShape+`,"start":1,"end":2,"sequences":3,"ctx":16,"hidden":false}`,
		map[string]string{"model": modelPath, "hidden": w0["hidden"]})
	var names []string
	for n := range w0 {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{"h.0.attn_output", "h.0.attn_qkv", "h.0.ffn_down_exps.0", "h.0.ffn_down_exps.1", "h.0.ffn_down_exps.2", "h.0.ffn_down_exps.3",
		"h.0.ffn_gate_up_exps.0", "h.0.ffn_gate_up_exps.1", "h.0.ffn_gate_up_exps.2", "h.0.ffn_gate_up_exps.3", "hidden", "routing"}
	if !slices.Equal(names, want) {
		t.Fatalf("window [0, 1) outputs %v, want %v", names, want)
	}

	// The reference: calib.Capture over [0, 2) in one pass on the same model and tokens.
	ctx := context.Background()
	m, _, gf, err := model.OpenGGUF(ctx, modelPath, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	seqs, err := stages.ReadTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	src, err := calib.NewEmbeddingSource(m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := calib.Capture(ctx, m, calib.Window{Start: 0, End: 2}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	var moeShape stages.ModelShape
	if err := json.Unmarshal([]byte(moeCalShape), &moeShape); err != nil {
		t.Fatal(err)
	}
	const total = 3 * 16
	for l, outs := range []map[string]string{w0, w1} {
		var routed int64
		var counts []int64
		for e := 0; e < 4; e++ {
			for _, tensor := range []string{"ffn_up_exps", "ffn_down_exps"} {
				name, layer, ok := stages.HessianOutput(moeShape, fmt.Sprintf("blk.%d.%s.weight#%d", l, tensor, e))
				if !ok || layer != l || outs[name] == "" {
					t.Fatalf("layer %d expert %d %s: output %q missing (%v)", l, e, tensor, name, ok)
				}
				h, err := calib.ReadHessianFile(ctx, outs[name])
				if err != nil {
					t.Fatal(err)
				}
				in := model.InputGateUp
				if tensor == "ffn_down_exps" {
					in = model.InputDown
				}
				r := ref.ExpertHessian(l, e, in)
				if h.K != r.K || h.Tokens != r.Tokens || !slices.Equal(h.Data, stored32(r.Data)) {
					t.Fatalf("%s: K %d, %d tokens; calib.Capture gives K %d, %d tokens (or other values)", name, h.K, h.Tokens, r.K, r.Tokens)
				}
				if in == model.InputGateUp {
					routed += h.Tokens
					counts = append(counts, h.Tokens)
				}
			}
		}
		t.Logf("layer %d: calibration tokens per expert %v", l, counts)
		if routed != total*2 {
			t.Errorf("layer %d: %d routed rows, want %d tokens x top-2", l, routed, total)
		}
		h, err := calib.ReadHessianFile(ctx, outs[fmt.Sprintf("h.%d.attn_qkv", l)])
		if err != nil || h.Tokens != total {
			t.Fatalf("layer %d qkv: %v, tokens %v", l, err, h)
		}
	}
}

// TestCalibrateMoEShapeMismatch: a plan whose shape lacks the experts of the model is refused, and a
// dense shape's outputs never name experts.
func TestCalibrateMoEShapeMismatch(t *testing.T) {
	modelPath, tokens := moeCalibration(t)
	dense := strings.Replace(moeCalShape, `,"n_expert":4,"n_expert_used":2`, "", 1)
	_, err := runStage(t, "calibrate", `{"shape":`+dense+`,"start":0,"end":1,"sequences":3,"ctx":16,"hidden":false}`,
		map[string]string{"model": modelPath, "tokens": tokens})
	if err == nil || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("a dense plan over an MoE model: %v, want a shape mismatch", err)
	}
}

// TestPropagateMoEExpertSlice: sequential mode binds a finalized expert slice ("<tensor>#<e>") to
// propagate, which runs it emulated: the hidden states differ from the float ones; an expert beyond the
// shape's count is refused when the node is bound, and a weight file whose dtype or geometry is not the
// one the node declared (its memory estimate rests on it) when it is read.
func TestPropagateMoEExpertSlice(t *testing.T) {
	modelPath, tokens := moeCalibration(t)
	fin := map[string]string{"weight": writeExpertQWeight(t, modelPath, "blk.0.ffn_up_exps.weight#1")}
	q, err := stages.ReadQWeight(fin["weight"])
	if err != nil {
		t.Fatal(err)
	}
	weights := func(name, dtype string, group int) string {
		return fmt.Sprintf(`[{"name":%q,"dtype":%q,"kp":%d,"group":%d}]`, name, dtype, q.Meta.KP, group)
	}
	cal := mustExec(t, "calibrate", `{"shape":`+moeCalShape+`,"start":0,"end":1,"sequences":3,"ctx":16,"hidden":true}`,
		map[string]string{"model": modelPath, "tokens": tokens})
	prop := mustExec(t, "propagate", `{"shape":`+moeCalShape+`,"start":0,"end":1,"sequences":3,"ctx":16,"weights":`+weights("blk.0.ffn_up_exps.weight#1", "I4", 32)+`}`,
		map[string]string{"model": modelPath, "tokens": tokens, "w.blk.0.ffn_up_exps.weight#1": fin["weight"]})
	a, b := readHidden(t, cal["hidden"]), readHidden(t, prop["hidden"])
	var diff, scale float64
	for i := range a {
		diff = max(diff, abs64(float64(a[i]-b[i])))
		scale = max(scale, abs64(float64(a[i])))
	}
	t.Logf("hidden states at layer 1, expert 1's up slice W4A4 vs float: max difference %.4g (max |h| %.3g)", diff, scale)
	if diff == 0 || diff > 0.5*scale {
		t.Fatalf("max difference %g (scale %g): want the small nonzero effect of one quantized expert slice", diff, scale)
	}
	for _, w := range []string{"blk.0.ffn_up_exps.weight#4", "blk.0.ffn_up_exps.weight#x", "blk.1.ffn_up_exps.weight#0"} {
		_, err := runStage(t, "propagate", `{"shape":`+moeCalShape+`,"start":0,"end":1,"sequences":3,"ctx":16,"weights":`+weights(w, "I4", 32)+`}`,
			map[string]string{"model": modelPath, "tokens": tokens, "w." + w: fin["weight"]})
		if err == nil || !strings.Contains(err.Error(), "not a block weight") {
			t.Errorf("propagate with weight %q: %v", w, err)
		}
	}
	for _, c := range []struct {
		dtype string
		group int
		want  string
	}{
		{"I8", 32, "the node declared I8"}, {"I4", 0, "the node declared I4"}, {"i4", 32, `write it I4`}, {"F16", 32, "want 0 (F16)"},
	} {
		_, err := runStage(t, "propagate", `{"shape":`+moeCalShape+`,"start":0,"end":1,"sequences":3,"ctx":16,"weights":`+weights("blk.0.ffn_up_exps.weight#1", c.dtype, c.group)+`}`,
			map[string]string{"model": modelPath, "tokens": tokens, "w.blk.0.ffn_up_exps.weight#1": fin["weight"]})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("propagate of an I4 g32 weight declared %s group %d: %v, want %q", c.dtype, c.group, err, c.want)
		}
	}
	// The rotation block the node declares the emulation's scratch by (PropagateMemory) is checked too.
	rotated := fmt.Sprintf(`[{"name":"blk.0.ffn_up_exps.weight#1","dtype":"I4","kp":%d,"group":32,"block":32}]`, q.Meta.KP)
	_, err = runStage(t, "propagate", `{"shape":`+moeCalShape+`,"start":0,"end":1,"sequences":3,"ctx":16,"weights":`+rotated+`}`,
		map[string]string{"model": modelPath, "tokens": tokens, "w.blk.0.ffn_up_exps.weight#1": fin["weight"]})
	if q.Meta.Rotation.Block != 0 || err == nil || !strings.Contains(err.Error(), "rotation block 0; the node declared I4") || !strings.Contains(err.Error(), "rotation block 32") {
		t.Errorf("propagate of an unrotated I4 weight (block %d) declared rotated by blocks of 32: %v, want the declared block refused", q.Meta.Rotation.Block, err)
	}
}

// quantizeSlice quantizes a weight or expert slice of src by RTN (bits 4 or 8, groups of 32, activations
// of the same width) into a finalized weight named as the slice.
func quantizeSlice(t *testing.T, src model.WeightSource, name string, bits int) *stages.QWeight {
	t.Helper()
	ctx := context.Background()
	lin, ok, err := src.Linear(ctx, name)
	if err != nil || !ok {
		t.Fatalf("%s: %v %v", name, ok, err)
	}
	d := lin.(*model.Dense)
	qw, err := quant.RTN(ctx, quant.Matrix{Name: name, Rows: d.N, Cols: d.K, Data: d.W}, nil, quant.WithBits(bits), quant.WithGroup(32))
	if err != nil {
		t.Fatal(err)
	}
	dtype := "I4"
	if bits == 8 {
		dtype = "I8"
	}
	return &stages.QWeight{Meta: stages.QWeightMeta{Name: name, DType: dtype, Method: "rtn", N: d.N, K: d.K, KP: qw.KP, Bits: bits, Group: qw.Group,
		ActBits: bits, QErr: qw.QErr, Source: artifacts.SumBytes([]byte(name)).String()}, Codes: qw.Codes, Scales: qw.Scales}
}

// writeExpertQWeight quantizes an expert slice of the model (RTN, int4, groups of 32, W4A4) into a
// finalized-weight file named as the slice, as finalize of an expert slice writes it.
func writeExpertQWeight(t *testing.T, modelPath, name string) string {
	t.Helper()
	m, _, gf, err := model.OpenGGUF(context.Background(), modelPath, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	q := quantizeSlice(t, m.Src, name, 4)
	path := filepath.Join(t.TempDir(), "expert.qweight")
	if err := stages.WriteQWeight(path, q); err != nil {
		t.Fatal(err)
	}
	return path
}

func readHidden(t *testing.T, path string) []float32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := calib.NewHiddenReader(f, path)
	if err != nil {
		t.Fatal(err)
	}
	var all []float32
	for {
		x, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, x...)
	}
	if int64(len(all)) != r.Header().PayloadBytes()/4 {
		t.Fatalf("%s: read %d values", path, len(all))
	}
	return all
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestScreenMoEPack screens a pack holding every expert slice of the MoE model (24 entries
// "<tensor>#<e>", int8 RTN, W8A8): the experts run emulated (a nonzero KL divergence) and the perplexity
// stays close to the float model's.
func TestScreenMoEPack(t *testing.T) {
	modelPath, _ := moeCalibration(t)
	ctx := context.Background()
	m, _, gf, err := model.OpenGGUF(ctx, modelPath, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	packPath := filepath.Join(t.TempDir(), "moe.orkpack")
	w, err := pack.Create(ctx, packPath, board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for l := 0; l < 2; l++ {
		for _, tensor := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
			for e := 0; e < 4; e++ {
				pw, err := quantizeSlice(t, m.Src, pack.ExpertName(fmt.Sprintf("blk.%d.%s.weight", l, tensor), e), 8).PackWeight()
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Add(ctx, pw); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(t.TempDir(), "eval.txt")
	if err := os.WriteFile(text, []byte(fingerprintText), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustExec(t, "screen", `{"shape":`+moeCalShape+`,"ctx":16,"chunks":4,"text_name":"eval.txt"}`,
		map[string]string{"model": modelPath, "pack": packPath, "text": text})
	b, err := os.ReadFile(out["screen.json"])
	if err != nil {
		t.Fatal(err)
	}
	var res stages.ScreenResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("MoE W8A8 expert pack: PPL %.4f (float %.4f, ratio %.4f), mean KLD %.6f, same top %.3f over %d chunks",
		res.PPL, res.BasePPL, res.PPLRatio, res.KLDMean, res.SameTop, res.Chunks)
	if res.Chunks != 4 || res.KLDMean <= 0 || res.PPLRatio < 0.9 || res.PPLRatio > 1.1 {
		t.Fatalf("screen of an int8 expert pack: %+v", res)
	}
}

// TestCalibrateSkip: CalibrateParams.Skip leaves the named sites' Hessians out of the node's outputs
// and its declared memory, writes the other outputs (Hessians, routing, hidden states) byte for byte as
// the node without Skip, and refuses a name that is not a captured site of the window or a list that is
// not sorted.
func TestCalibrateSkip(t *testing.T) {
	modelPath, tokens := moeCalibration(t)
	var shape stages.ModelShape
	if err := json.Unmarshal([]byte(moeCalShape), &shape); err != nil {
		t.Fatal(err)
	}
	sites := stages.HessianSites(shape, 0, 1)
	if want := []string{"h.0.attn_qkv", "h.0.attn_output", "h.0.ffn_gate_up_exps", "h.0.ffn_down_exps"}; !slices.Equal(sites, want) {
		t.Fatalf("HessianSites %v, want %v", sites, want)
	}
	for tensor, want := range map[string]string{"blk.0.ffn_up_exps.weight#3": "h.0.ffn_gate_up_exps", "blk.0.attn_v.weight": "h.0.attn_qkv", "blk.0.ffn_gate_inp.weight": ""} {
		if got, ok := stages.HessianSite(shape, tensor); got != want || ok != (want != "") {
			t.Errorf("HessianSite(%s) = %q, %v; want %q", tensor, got, ok, want)
		}
	}
	params := func(skip string) string {
		return `{"shape":` + moeCalShape + `,"start":0,"end":1,"sequences":3,"ctx":16,"hidden":true` + skip + `}`
	}
	in := map[string]string{"model": modelPath, "tokens": tokens}
	all := mustExec(t, "calibrate", params(""), in)
	part := mustExec(t, "calibrate", params(`,"skip":["h.0.ffn_down_exps","h.0.ffn_gate_up_exps"]`), in)
	var names []string
	for n := range part {
		names = append(names, n)
	}
	sort.Strings(names)
	if want := []string{"h.0.attn_output", "h.0.attn_qkv", "hidden", "routing"}; !slices.Equal(names, want) {
		t.Fatalf("outputs with the expert sites skipped: %v, want %v", names, want)
	}
	for _, n := range names {
		a, err := os.ReadFile(all[n])
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(part[n])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a, b) {
			t.Errorf("output %s differs with Skip", n)
		}
	}
	if a, b := stages.CalibrateMemory(shape, 0, 1, 3, 16), stages.CalibrateMemory(shape, 0, 1, 3, 16, "h.0.ffn_down_exps", "h.0.ffn_gate_up_exps"); b >= a {
		t.Errorf("declared memory %d with the expert sites skipped, %d without: want less", b, a)
	}
	for _, bad := range []string{`,"skip":["h.1.attn_qkv"]`, `,"skip":["h.0.ffn_gate_inp"]`, `,"skip":["h.0.ffn_gate_up_exps.0"]`, `,"skip":["h.0.ffn_down_exps","h.0.attn_qkv"]`} {
		if _, err := runStage(t, "calibrate", params(bad), in); err == nil {
			t.Errorf("skip %s: accepted", bad)
		}
	}
}
