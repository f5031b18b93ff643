package stages_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/ork/quant"
	"orkpipe/stages"
)

// fingerprintText is the fixed corpus and evaluation text of the build-stage fingerprints.
var fingerprintText = strings.Repeat("Once upon a time there was a little boat. She sailed to the sea and saw the sun. ", 12)

type buildStep struct {
	name   string
	stage  string
	params string
	inputs map[string]string // input name -> "file:<fixture>" or "<step>.<output>"
	tools  map[string]string
}

// buildSteps runs every build stage kind once, on a tiny synthetic model, each consuming the
// outputs of the steps before it.
var buildSteps = []buildStep{
	{"synth", "synth", `{"layers":2,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"vocab":360,"ctx":64,"type":"F16","seed":11}`, nil, nil},
	{"tokenize", "tokenize", `{"sequences":2,"ctx":16,"corpus_name":"corpus.txt"}`, map[string]string{"model": "synth.model.gguf", "corpus": "file:text"}, nil},
	{"calibrate", "calibrate", `{"shape":` + fpShape + `,"start":0,"end":1,"sequences":2,"ctx":16,"hidden":true}`,
		map[string]string{"model": "synth.model.gguf", "tokens": "tokenize.tokens"}, nil},
	{"finalize", "finalize", `{"tensor":"blk.0.ffn_down.weight","method":"gptq","dtype":"I4_ROT_A8","group":32,"rotation":"hadamard","act_bits":8,"clip_grid":null,"damp":0.01,"act_order":false,"seed":5,"n":64,"k":96}`,
		map[string]string{"model": "synth.model.gguf", "hessian": "calibrate.h.0.ffn_down"}, nil},
	// The scale levers: GPTQ's loss scoring the scales with negative scales allowed; RTN with negative scales.
	{"finalize-scale", "finalize", `{"tensor":"blk.0.ffn_down.weight","method":"gptq","dtype":"I4_ROT_A8","group":32,"rotation":"hadamard","act_bits":8,"clip_grid":null,"damp":0.01,"act_order":false,"seed":5,"n":64,"k":96,"scale_search":"gptq","scale_sign":"search"}`,
		map[string]string{"model": "synth.model.gguf", "hessian": "calibrate.h.0.ffn_down"}, nil},
	// The scales refitted to GPTQ's codes, two rounds (quant.WithScaleRefit), on rows of 8 groups (K = 96
	// stored as one 256 block): more groups than the refit's steps, so a change of what the steps do shows
	// here (with 3 groups a row, 4 and 8 steps gave the same bytes and a changed stage went unseen).
	{"finalize-refit", "finalize", `{"tensor":"blk.0.ffn_down.weight","method":"gptq","dtype":"I4_ROT_A8","group":32,"rotation":"hadamard","act_bits":8,"clip_grid":null,"damp":0.01,"act_order":false,"seed":5,"n":64,"k":96,"scale_search":"gptq","scale_sign":"search","rotation_block":256,"scale_refit":2,"refit_steps":4,"refit_version":5}`,
		map[string]string{"model": "synth.model.gguf", "hessian": "calibrate.h.0.ffn_down"}, nil},
	// Eight rotation seeds scored before the one GPTQ run (quant.WithRotationSearch), each scored by its
	// RTN weight's error against the Hessian: a change of the scores' arithmetic that picks another
	// seed shows here.
	{"finalize-search", "finalize", `{"tensor":"blk.0.ffn_down.weight","method":"gptq","dtype":"I4_ROT_A8","group":32,"rotation":"hadamard","act_bits":8,"clip_grid":null,"damp":0.01,"act_order":false,"seed":5,"n":64,"k":96,"rotation_seeds":8,"search_version":3}`,
		map[string]string{"model": "synth.model.gguf", "hessian": "calibrate.h.0.ffn_down"}, nil},
	{"finalize-rtn-sign", "finalize", `{"tensor":"blk.0.attn_q.weight","method":"rtn","dtype":"I4_NATIVE","group":32,"rotation":"none","act_bits":4,"clip_grid":null,"damp":0,"act_order":false,"seed":0,"n":64,"k":64,"scale_sign":"search"}`,
		map[string]string{"model": "synth.model.gguf"}, nil},
	{"finalize-rtn", "finalize", `{"tensor":"blk.0.attn_q.weight","method":"rtn","dtype":"I4_NATIVE","group":0,"rotation":"none","act_bits":4,"clip_grid":null,"damp":0,"act_order":false,"seed":0,"n":64,"k":64}`,
		map[string]string{"model": "synth.model.gguf"}, nil},
	{"propagate", "propagate", `{"shape":` + fpShape + `,"start":0,"end":1,"sequences":2,"ctx":16,"weights":[{"name":"blk.0.attn_q.weight","dtype":"I4_NATIVE","kp":64,"group":0},{"name":"blk.0.ffn_down.weight","dtype":"I4_ROT_A8","kp":96,"group":32,"block":32}]}`,
		map[string]string{"model": "synth.model.gguf", "tokens": "tokenize.tokens", "w.blk.0.attn_q.weight": "finalize-rtn.weight", "w.blk.0.ffn_down.weight": "finalize.weight"}, nil},
	// Activation samples (calibrate with act_sample) and the activation clip search on one of them.
	{"calibrate-sampled", "calibrate", `{"shape":` + fpShape + `,"start":0,"end":1,"sequences":2,"ctx":16,"hidden":false,"act_sample":7}`,
		map[string]string{"model": "synth.model.gguf", "tokens": "tokenize.tokens"}, nil},
	{"act-clip", "act-clip", `{"tensor":"blk.0.ffn_down.weight","n":64,"k":96,"kp":96,"act_bits":8,"grid":[1,0.9,0.8,0.7,0.6,0.5],"channels":16,"rows":7}`,
		map[string]string{"model": "synth.model.gguf", "weight": "finalize.weight", "acts": "calibrate-sampled.a.0.ffn_down"}, nil},
	// GPTQ on the quantized inputs of an activation sample of 128 rows (the asymmetric target, the clip
	// chosen from a grid).
	{"tokenize-long", "tokenize", `{"sequences":4,"ctx":32,"corpus_name":"corpus.txt"}`, map[string]string{"model": "synth.model.gguf", "corpus": "file:text"}, nil},
	{"calibrate-long", "calibrate", `{"shape":` + fpShape + `,"start":0,"end":1,"sequences":4,"ctx":32,"hidden":false,"act_sample":128}`,
		map[string]string{"model": "synth.model.gguf", "tokens": "tokenize-long.tokens"}, nil},
	{"finalize-inputs", "finalize", `{"tensor":"blk.0.attn_q.weight","method":"gptq","dtype":"I4_NATIVE","group":32,"rotation":"hadamard","act_bits":4,"clip_grid":null,"damp":0.01,"act_order":false,"seed":5,"n":64,"k":64,"scale_search":"gptq","gptq_inputs":"asymmetric","input_clip_grid":[1,0.9,0.8],"input_rows":128}`,
		map[string]string{"model": "synth.model.gguf", "hessian": "calibrate-long.h.0.attn_qkv", "acts": "calibrate-long.a.0.attn_qkv"}, nil},
	{"tile", "tile", `{"nibbles":"low-first","n":64,"kp":96}`, map[string]string{"weight": "finalize.weight"}, nil},
	{"tile-rtn", "tile", `{"nibbles":"high-first","n":64,"kp":64}`, map[string]string{"weight": "finalize-rtn.weight"}, nil},
	// finalize-rtn and tile-rtn in one node: the same entry (TestRTNTileMatchesFinalizeThenTile).
	{"rtn-tile", "rtn-tile", `{"finalize":{"tensor":"blk.0.attn_q.weight","method":"rtn","dtype":"I4_NATIVE","group":0,"rotation":"none","act_bits":4,"clip_grid":null,"damp":0,"act_order":false,"seed":0,"n":64,"k":64},"nibbles":"high-first"}`,
		map[string]string{"model": "synth.model.gguf"}, nil},
	{"write-orkpack", "write-orkpack", `{"board":"rk3588","entries":["blk.0.attn_q.weight","blk.0.ffn_down.weight"],"max_entry_bytes":1048576}`,
		map[string]string{"e.blk.0.attn_q.weight": "tile-rtn.entry", "e.blk.0.ffn_down.weight": "tile.entry"}, nil},
	{"emit-stub", "emit-stub", `{"owned":["blk.0.attn_q.weight","blk.0.ffn_down.weight"]}`, map[string]string{"model": "synth.model.gguf"}, nil},
	{"screen", "screen", `{"shape":` + fpShape + `,"ctx":16,"chunks":4,"text_name":"eval.txt"}`,
		map[string]string{"model": "synth.model.gguf", "pack": "write-orkpack.pack", "text": "file:text"}, nil},
	{"verify-local", "verify-local", `{"board":"rk3588"}`, map[string]string{"model": "synth.model.gguf", "pack": "write-orkpack.pack", "stub": "emit-stub.stub.gguf"}, nil},
	{"report", "report", `{"name":"fp","screen":true,"board":"rk3588","promote_from":{"blk.0.attn_q.weight":"I4"},"deps":[{"name":"corpus","uri":"file:///corpus.txt"}],"overrides":["a=b"]}`,
		map[string]string{"pack": "write-orkpack.pack", "stub": "emit-stub.stub.gguf", "verify": "verify-local.verify.json", "screen": "screen.screen.json", "dep.corpus": "file:text"},
		map[string]string{"orkpipe": "file:tool"}},
	{"provenance", "provenance", `{"name":"fp","subjects":["fp.orkpack","report.json"],"deps":[{"name":"corpus","uri":"file:///corpus.txt"},{"name":"recipe","uri":"file:///fp.yaml"}],"recipe":{"name":"fp"},"overrides":["a=b"],"model":` + fpModel + `}`,
		map[string]string{"subject.fp.orkpack": "write-orkpack.pack", "subject.report.json": "report.report.json", "dep.corpus": "file:text", "dep.recipe": "file:text"},
		map[string]string{"orkpipe": "file:tool"}},
	// The pack's sha256 from its own node: the same statement (checked below); the stub's too.
	{"sha256", "sha256", `{}`, map[string]string{"file": "write-orkpack.pack"}, nil},
	{"sha256-stub", "sha256", `{}`, map[string]string{"file": "emit-stub.stub.gguf"}, nil},
	{"provenance-sha256", "provenance", `{"name":"fp","subjects":["fp.orkpack","report.json"],"deps":[{"name":"corpus","uri":"file:///corpus.txt"},{"name":"recipe","uri":"file:///fp.yaml"}],"recipe":{"name":"fp"},"overrides":["a=b"],"sha256":["fp.orkpack"],"model":` + fpModel + `}`,
		map[string]string{"subject.fp.orkpack": "write-orkpack.pack", "sha256.fp.orkpack": "sha256.sha256.json", "subject.report.json": "report.report.json", "dep.corpus": "file:text", "dep.recipe": "file:text"},
		map[string]string{"orkpipe": "file:tool"}},
	// Mixture of experts: a synthetic MoE model, per-expert Hessians, and expert slices finalized by
	// GPTQ and by RTN weighted with an imatrix (the fixture fpImatrix writes).
	{"synth-moe", "synth", `{"layers":2,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"vocab":360,"ctx":64,"type":"F16","seed":11,"n_expert":4,"n_expert_used":2}`, nil, nil},
	{"calibrate-moe", "calibrate", `{"shape":` + fpShapeMoE + `,"start":0,"end":1,"sequences":2,"ctx":16,"hidden":false}`,
		map[string]string{"model": "synth-moe.model.gguf", "tokens": "tokenize.tokens"}, nil},
	{"finalize-expert", "finalize", `{"tensor":"blk.0.ffn_down_exps.weight","method":"gptq","dtype":"I4","group":32,"rotation":"none","act_bits":8,"clip_grid":null,"damp":0.01,"act_order":false,"seed":0,"n":64,"k":96,"expert":1}`,
		map[string]string{"model": "synth-moe.model.gguf", "hessian": "calibrate-moe.h.0.ffn_down_exps.1"}, nil},
	{"finalize-expert-imatrix", "finalize", `{"tensor":"blk.0.ffn_up_exps.weight","method":"rtn","dtype":"I4_NATIVE","group":32,"rotation":"none","act_bits":8,"clip_grid":null,"damp":0,"act_order":false,"seed":0,"n":96,"k":64,"expert":3,"importance":"imatrix"}`,
		map[string]string{"model": "synth-moe.model.gguf", "imatrix": "file:imatrix"}, nil},
	{"tile-expert", "tile", `{"nibbles":"low-first","n":64,"kp":96}`, map[string]string{"weight": "finalize-expert.weight"}, nil},
	// Routing statistics and an expert residency plan: the window's routing merged, the plan of a pack of
	// one expert slice, that pack with its residency section, its screen with the held-out text's
	// routing, and a report of them (its stub and verify inputs are the dense pack's: the report does not
	// cross-check them).
	{"routing", "routing", `{"windows":1}`, map[string]string{"w.0": "calibrate-moe.routing"}, nil},
	{"residency", "residency", `{"board":"rk3588","budget":"auto","domains":1,"entries":[{"name":"blk.0.ffn_down_exps.weight#1","dtype":"I4","k":96,"n":64}]}`,
		map[string]string{"routing": "routing.routing.json"}, nil},
	{"write-orkpack-resident", "write-orkpack", `{"board":"rk3588","entries":["blk.0.ffn_down_exps.weight#1"],"max_entry_bytes":1048576,"residency":true}`,
		map[string]string{"e.blk.0.ffn_down_exps.weight#1": "tile-expert.entry", "residency": "residency.residency.json"}, nil},
	{"screen-moe", "screen", `{"shape":` + fpShapeMoE + `,"ctx":16,"chunks":4,"text_name":"eval.txt","routing":true}`,
		map[string]string{"model": "synth-moe.model.gguf", "pack": "write-orkpack-resident.pack", "text": "file:text"}, nil},
	{"report-moe", "report", `{"name":"fp-moe","screen":false,"board":"rk3588","routing":true,"residency":true,"held_out":"eval.txt"}`,
		map[string]string{"pack": "write-orkpack-resident.pack", "stub": "emit-stub.stub.gguf", "verify": "verify-local.verify.json",
			"routing": "routing.routing.json", "residency": "residency.residency.json", "held-out": "screen-moe.routing.json"},
		map[string]string{"orkpipe": "file:tool"}},
}

const fpShapeMoE = `{"layers":2,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"head_dim":16,"vocab":360,"n_expert":4,"n_expert_used":2}`

// fpImatrix is a fixed llama.cpp GGUF-form imatrix for blk.0.ffn_up_exps.weight of the synthetic MoE
// model: 4 experts of K = 64, Σx² = (i+1)·(e+1) over 10 tokens each.
func fpImatrix(t *testing.T) string {
	t.Helper()
	e := &calib.ImatrixEntry{Name: "blk.0.ffn_up_exps.weight", K: 64}
	for x := 0; x < 4; x++ {
		row := make([]float64, 64)
		for i := range row {
			row[i] = float64((i + 1) * (x + 1))
		}
		e.Sum2 = append(e.Sum2, row)
		e.Counts = append(e.Counts, 10)
	}
	var b bytes.Buffer
	if err := calib.WriteImatrixGGUF(context.Background(), &b, []*calib.ImatrixEntry{e}, []string{"fixture"}, 1); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// fpModel is the provenance stage's model description in the table.
const fpModel = `{"name":"fp","architecture":"llama","paramSize":"1.2M","precision":"int4","quantization":"gptq","boardProfile":"rk3588"}`

const fpShape = `{"layers":2,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"head_dim":16,"vocab":360}`

// TestBuildStageFingerprints is DESIGN.md's stage fingerprint test for the build stage kinds: each
// runs on fixed tiny inputs and its output digests are compared with
// testdata/build-fingerprints.json (rewrite with -update). A changed digest under an unchanged
// version fails: bump the stage's version, then -update. A step whose key material differs from the
// table's because a step it reads moved is not compared (that step is the one reported); a key that
// differs while everything it reads is as the table records (new params, a new input) fails.
// Together with TestFingerprints (the demo
// kinds) every registered kind must be covered. The table holds the pure-Go build's outputs: the
// -tags blas build sums GPTQ's and calibrate's products in OpenBLAS's order (equal to float
// tolerance, which ork/quant's TestBLASMatchesPureGo checks), so it skips this test.
func TestBuildStageFingerprints(t *testing.T) {
	if quant.BLASBackend != "gonum" {
		testfiles.SkipBuild(t, "the fingerprints are the pure-Go build's outputs; this build's BLAS is %s, whose sums differ in the last bits (run without -tags blas)", quant.BLASBackend)
	}
	ctx := context.Background()
	dir := t.TempDir()
	fixture := map[string]stages.File{
		"text":    writeFixture(t, dir, "text", fingerprintText),
		"tool":    writeFixture(t, dir, "tool", "a fixed stand-in for the orkpipe binary\n"),
		"imatrix": writeFixture(t, dir, "imatrix", fpImatrix(t)),
	}
	files := map[string]stages.File{}
	resolve := func(ref string) stages.File {
		if f, ok := strings.CutPrefix(ref, "file:"); ok {
			return fixture[f]
		}
		f, ok := files[ref]
		if !ok {
			t.Fatalf("fingerprint input %q not produced", ref)
		}
		return f
	}
	type fingerprint struct {
		Version int               `json:"version"`
		Key     string            `json:"key"` // BLAKE3 of the key material: version, params, input digests
		Outputs map[string]string `json:"outputs"`
	}
	got := map[string]fingerprint{}
	for _, s := range buildSteps {
		k, err := stages.Lookup(s.stage)
		if err != nil {
			t.Fatal(err)
		}
		m := stages.KeyMaterial{Stage: s.stage, Version: k.Version(), Inputs: map[string]artifacts.Digest{}, Tools: map[string]artifacts.Digest{}}
		b, err := k.Bind([]byte(s.params))
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		m.Params = b.Params()
		inputs, tools := map[string]stages.File{}, map[string]stages.File{}
		for n, ref := range s.inputs {
			inputs[n] = resolve(ref)
			m.Inputs[n] = inputs[n].Digest
		}
		for n, ref := range s.tools {
			tools[n] = resolve(ref)
			m.Tools[n] = tools[n].Digest
		}
		out := filepath.Join(dir, "out-"+s.name)
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		names, err := stages.Execute(ctx, m, inputs, tools, out, nil)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		key, err := m.Key()
		if err != nil {
			t.Fatal(err)
		}
		fp := fingerprint{Version: m.Version, Key: key.String(), Outputs: map[string]string{}}
		for _, n := range names {
			p := filepath.Join(out, n)
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			d, size, err := artifacts.SumReader(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			files[s.name+"."+n] = stages.File{Path: p, Digest: d, Size: size}
			fp.Outputs[n] = d.String()
		}
		got[s.name] = fp
	}
	if a, b := got["provenance"].Outputs["provenance.json"], got["provenance-sha256"].Outputs["provenance.json"]; a != b {
		t.Errorf("provenance with the pack's sha256 from a sha256 node wrote %s, hashing it itself %s", b, a)
	}
	golden := filepath.Join("testdata", "build-fingerprints.json")
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var want map[string]fingerprint
	raw, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	// moved: the steps whose outputs are not the table's (for whatever reason, a version bump
	// included): a step reading one of them has a new key for a reason reported elsewhere.
	moved := map[string]bool{}
	for _, s := range buildSteps {
		w, ok := want[s.name]
		moved[s.name] = !ok || !maps.Equal(got[s.name].Outputs, w.Outputs)
	}
	for _, s := range buildSteps {
		w, ok := want[s.name]
		if !ok {
			t.Errorf("%s: not in %s: run with -update", s.name, golden)
			continue
		}
		if got[s.name].Version != w.Version {
			t.Errorf("%s: version %d, table says %d: run with -update to record its new fingerprints", s.name, got[s.name].Version, w.Version)
			continue
		}
		if got[s.name].Key != w.Key {
			if up := movedInputs(s, moved); len(up) > 0 {
				t.Logf("%s: key material changed with its inputs from %v; its outputs are not compared", s.name, up)
			} else {
				t.Errorf("%s: key %s, table says %s, though every step it reads has the table's outputs: its params or inputs changed; run with -update (after a version bump if its output changed)", s.name, got[s.name].Key, w.Key)
			}
			continue
		}
		for out, d := range w.Outputs {
			if got[s.name].Outputs[out] != d {
				t.Errorf("%s output %s: %s, table says %s: the output changed without a version bump", s.name, out, got[s.name].Outputs[out], d)
			}
		}
	}
	// Every registered kind is fingerprinted here or by TestFingerprints.
	covered := map[string]bool{}
	for _, s := range buildSteps {
		covered[s.stage] = true
	}
	var demo map[string]json.RawMessage
	if raw, err := os.ReadFile(filepath.Join("testdata", "fingerprints.json")); err == nil {
		json.Unmarshal(raw, &demo)
	}
	for n := range demo {
		covered[n] = true
	}
	var missing []string
	for _, n := range stages.Names() {
		if !covered[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("stage kinds without a fingerprint: %v", missing)
	}
}

func writeFixture(t *testing.T, dir, name, content string) stages.File {
	t.Helper()
	p := filepath.Join(dir, "fixture-"+name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return stages.File{Path: p, Digest: artifacts.SumBytes([]byte(content)), Size: int64(len(content))}
}

// movedInputs returns the steps among s's inputs and tools whose outputs moved, sorted.
func movedInputs(s buildStep, moved map[string]bool) []string {
	var up []string
	for _, refs := range []map[string]string{s.inputs, s.tools} {
		for _, ref := range refs {
			if step, _, ok := strings.Cut(ref, "."); ok && !strings.HasPrefix(ref, "file:") && moved[step] && !slices.Contains(up, step) {
				up = append(up, step)
			}
		}
	}
	slices.Sort(up)
	return up
}
