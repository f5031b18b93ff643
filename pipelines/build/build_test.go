package build_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
	"orkpipe/stages"
)

// tinyRecipe is a synthetic model small enough to build in seconds, calibrated one-shot in windows of
// one layer so that the re-run sets below are exact.
const tinyRecipe = `name: tiny
source:
  synth: {layers: 2, n_embd: 64, n_ff: 96, n_head: 4, n_head_kv: 2, vocab: 360, ctx: 64, type: F16, seed: 3}
calibration:
  corpus: %s
  sequences: 4
  ctx: 32
  mode: %s
  window: 1
schemes:
  - match: 'blk\.\d+\.ffn_down\.weight'
    method: gptq
    dtype: I4_ROT_A8
    group: 32
  - match: 'blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up)\.weight'
    method: gptq
    dtype: I4_NATIVE
    group: 32
    rotation: hadamard
screen:
  text: %s
  ctx: 32
`

func abs(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeRecipe writes the tiny recipe (mode sequential or oneshot) and returns its path.
func writeRecipe(t *testing.T, mode string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "tiny.yaml")
	body := fmt.Sprintf(tinyRecipe, abs(t, "../recipes/demo-corpus.txt"), mode, abs(t, "../recipes/demo-eval.txt"))
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type rig struct {
	store *artifacts.Store
	eng   *engine.Engine
}

func newRig(t *testing.T) *rig {
	t.Helper()
	store, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	eng, err := engine.New(store, engine.WithJobs(2), engine.WithMemoryBudget(2<<30))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{store: store, eng: eng}
}

// build loads the recipe with the overrides, plans and builds it into out, and returns the ids of
// the nodes that executed, sorted.
func (r *rig) build(t *testing.T, path, out string, sets ...string) ([]string, *engine.Result, error) {
	t.Helper()
	name, plan, err := r.plan(t, path, sets...)
	if err != nil {
		return nil, nil, err
	}
	res, err := r.eng.Build(context.Background(), name, plan, engine.BuildOptions{OutDir: out})
	var ran []string
	if res != nil {
		for _, n := range res.Nodes {
			if n.Outcome == engine.OutcomeExecuted {
				ran = append(ran, n.ID)
			}
		}
	}
	sort.Strings(ran)
	return ran, res, err
}

// plan loads the recipe with the overrides and plans it; it returns the target's name and the plan.
func (r *rig) plan(t *testing.T, path string, sets ...string) (string, *engine.Plan, error) {
	t.Helper()
	rec, err := recipe.Load(path, sets...)
	if err != nil {
		return "", nil, err
	}
	tg, err := build.New(rec, build.WithMemoryBudget(2<<30), build.WithOverrides(sets))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tg.Graph(context.Background())
	if err != nil {
		return "", nil, err
	}
	plan, err := r.eng.Plan(g)
	return tg.Name(), plan, err
}

func sorted(s ...string) []string { sort.Strings(s); return s }

// TestRebuildCounts is acceptance 3: a second build executes nothing; changing the group size of
// one tensor class re-runs exactly that class's finalize and tile nodes plus write-orkpack, the pack's
// sha256, screen, verify-local, report and provenance (not emit-stub: the pack owns the same
// tensors); changing the
// screen text re-runs screen and what records its result (report, provenance), nothing else.
func TestRebuildCounts(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "oneshot")
	out := filepath.Join(t.TempDir(), "out")
	ran, res, err := r.build(t, path, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) != len(res.Nodes) || len(ran) < 30 {
		t.Fatalf("first build executed %d of %d nodes", len(ran), len(res.Nodes))
	}
	for _, f := range []string{"tiny.orkpack", "tiny.orkpack.gguf", "report.json", "summary.txt", "provenance.json"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Mode().Perm()&0o222 != 0 {
			t.Errorf("output %s: %v (mode %v), want a read-only file", f, err, st.Mode())
		}
	}
	var rep stages.Report
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if err := json.Unmarshal(b, &rep); err != nil || rep.Screen == nil || rep.Screen.PPL <= 0 || len(rep.Weights) != 14 {
		t.Fatalf("report: %v, %+v", err, rep)
	}

	ran, _, err = r.build(t, path, out)
	if err != nil || len(ran) != 0 {
		t.Fatalf("second build executed %v (err %v), want nothing", ran, err)
	}

	out2 := filepath.Join(t.TempDir(), "out")
	ran, _, err = r.build(t, path, out2, "schemes.0.group=64")
	if err != nil {
		t.Fatal(err)
	}
	want := sorted("finalize:blk.0.ffn_down.weight", "finalize:blk.1.ffn_down.weight", "tile:blk.0.ffn_down.weight",
		"tile:blk.1.ffn_down.weight", "write-orkpack", "sha256:tiny.orkpack", "screen", "verify-local", "report", "provenance")
	if strings.Join(ran, " ") != strings.Join(want, " ") {
		t.Errorf("group change re-ran\n  %v\nwant\n  %v", ran, want)
	}

	text := filepath.Join(t.TempDir(), "eval.txt")
	eval, _ := os.ReadFile(abs(t, "../recipes/demo-eval.txt"))
	if err := os.WriteFile(text, append(eval, []byte("\nOne more line changes the screen text.\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	out3 := filepath.Join(t.TempDir(), "out")
	ran, _, err = r.build(t, path, out3, "schemes.0.group=64", "screen.text="+text)
	if err != nil {
		t.Fatal(err)
	}
	if want := sorted("screen", "report", "provenance"); strings.Join(ran, " ") != strings.Join(want, " ") {
		t.Errorf("screen text change re-ran %v, want %v", ran, want)
	}
}

// TestSequentialPropagates checks the sequential graph: the second window's calibration reads the
// hidden states propagated through the first window's finalized weights.
func TestSequentialPropagates(t *testing.T) {
	rec, err := recipe.Load(writeRecipe(t, "sequential"))
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := build.New(rec, build.WithMemoryBudget(2<<30))
	g, err := tg.Graph(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g.Node("propagate[0,1)") == nil || g.Node("calibrate[1,2)") == nil || g.Node("propagate[1,2)") != nil {
		t.Fatalf("sequential windows: %v", nodeIDs(g))
	}
}

func nodeIDs(g *engine.Graph) []string {
	var ids []string
	for _, n := range g.Nodes() {
		ids = append(ids, n.ID())
	}
	return ids
}

// TestBadInputs is acceptance 5: each bad input is a clear error and nothing is written to the
// output directory.
func TestBadInputs(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "oneshot")
	short := filepath.Join(t.TempDir(), "short.txt")
	os.WriteFile(short, []byte("Too short a corpus.\n"), 0o644)
	tests := []struct {
		name string
		sets []string
		want []string
	}{
		{"bad synth shape", []string{"source.synth.layers=0"}, []string{"source.synth.layers"}},
		{"missing model file", []string{"source.synth=null", "source.model=/nonexistent/m.gguf"}, []string{"source.model", "/nonexistent/m.gguf", "no such file"}},
		{"pattern matches nothing", []string{"schemes.0.match=blk\\.\\d+\\.ffn_dwn\\.weight"}, []string{"schemes[0]", "ffn_dwn", "matches no weight"}},
		{"short corpus", []string{"calibration.corpus=" + short}, []string{"short.txt", "too short", "4 x 32 = 128", "sequences of 32 (lower the sequences or the ctx"}},
		{"failing gate", []string{"screen.gates.max_kld_mean=0.0000001"}, []string{"max_kld_mean", "exceeds the threshold 1e-07"}},
		{"missing screen text", []string{"screen.text=/nonexistent/eval.txt"}, []string{"screen.text", "/nonexistent/eval.txt"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			_, _, err := r.build(t, path, out, tc.sets...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("output directory has %d entries after a failed build", len(ents))
			}
		})
	}
	_, err := recipe.Load(path, "screen.gatez.max_kld_mean=1")
	if err == nil || !strings.Contains(err.Error(), "gatez") {
		t.Errorf("typo in an override: %v", err)
	}
	typo := filepath.Join(t.TempDir(), "typo.yaml")
	body, _ := os.ReadFile(path)
	os.WriteFile(typo, []byte(strings.Replace(string(body), "  sequences: 4", "  sequencez: 4", 1)), 0o644)
	_, err = recipe.Load(typo)
	if err == nil || !strings.Contains(err.Error(), "sequencez") || !errors.Is(err, recipe.ErrInvalid) {
		t.Errorf("unknown key: %v", err)
	}
}

// TestWindowTooBig: a calibration window that cannot fit the budget is a plan error naming it.
func TestWindowTooBig(t *testing.T) {
	rec, err := recipe.Load(writeRecipe(t, "oneshot"))
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := build.New(rec, build.WithMemoryBudget(1<<20))
	_, err = tg.Graph(context.Background())
	if !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), "--mem") {
		t.Fatalf("err = %v", err)
	}
}

// planErr plans the recipe at path (with sets) under a 2 GiB budget and returns the planning error.
func planErr(t *testing.T, path string, sets ...string) error {
	t.Helper()
	rec, err := recipe.Load(path, sets...)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := build.New(rec, build.WithMemoryBudget(2<<30))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tg.Graph(context.Background())
	return err
}

func readReport(t *testing.T, dir string) stages.Report {
	t.Helper()
	var rep stages.Report
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestPromotion: with a budget for one extra page, exactly the ffn_down weight with the worse base
// qerr is promoted to I8_ROT; the base tiers are not re-run.
func TestPromotion(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "oneshot")
	base := filepath.Join(t.TempDir(), "out")
	if _, _, err := r.build(t, path, base); err != nil {
		t.Fatal(err)
	}
	qerr := map[string]float64{}
	for _, w := range readReport(t, base).Weights {
		qerr[w.Name] = w.QErr
	}
	worst := "blk.0.ffn_down.weight"
	if qerr["blk.1.ffn_down.weight"] > qerr[worst] {
		worst = "blk.1.ffn_down.weight"
	}
	out := filepath.Join(t.TempDir(), "out")
	ran, _, err := r.build(t, path, out, "promote.match=blk\\.\\d+\\.ffn_down\\.weight", "promote.to=I8_ROT", "promote.budget_mib=0.005")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ran {
		if strings.HasPrefix(id, "finalize:") || strings.HasPrefix(id, "tile:") || strings.HasPrefix(id, "calibrate") {
			t.Errorf("promotion re-ran %s", id)
		}
	}
	var promoted []string
	for _, w := range readReport(t, out).Weights {
		if w.DType == "I8_ROT" {
			promoted = append(promoted, w.Name)
		}
	}
	if len(promoted) != 1 || promoted[0] != worst {
		t.Errorf("promoted %v, want [%s] (base qerr %v)", promoted, worst, qerr)
	}
}

// TestBlockOf: a weight's layer is its block number as stages.HessianOutput reads it, else what
// fmt.Sscanf's "blk.%d." reads, else -1.
func TestBlockOf(t *testing.T) {
	for name, want := range map[string]int{
		"blk.0.attn_q.weight": 0, "blk.63.ffn_down.weight": 63, "blk.7.ffn_up_exps.weight": 7,
		"blk.3.ssm_conv1d.weight": 3, "token_embd.weight": -1, "output.weight": -1, "blk.x.attn_q.weight": -1,
		"blk.007.attn_q.weight": 7, "blk.12": -1, "blk..weight": -1,
	} {
		if got := build.BlockOf(name); got != want {
			t.Errorf("BlockOf(%q) = %d, want %d", name, got, want)
		}
	}
}
