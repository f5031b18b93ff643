package build_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/fixtures"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/recipe"
)

// moeRecipe is a synthetic MoE model (2 layers, 4 experts of n_ff 96, n_embd 64). The first scheme
// matches every block weight, the router included: the router is never packed.
const moeRecipe = `name: tiny-moe
source:
  synth: {layers: 2, n_embd: 64, n_ff: 96, n_head: 4, n_head_kv: 2, vocab: 360, ctx: 64, type: F16, seed: 5, n_expert: 4, n_expert_used: 2}
schemes:
  - match: 'blk\.\d+\.ffn_\w+\.weight'
    method: rtn
    dtype: I4
    group: 32
  - match: 'blk\.\d+\.attn_\w+\.weight'
    method: rtn
    dtype: I4_NATIVE
`

var moeExpertTensors = []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}

func writeMoERecipe(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny-moe.yaml")
	if err := os.WriteFile(p, []byte(moeRecipe), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// moeImatrix returns the imatrix entries of the synthetic MoE model's expert tensors (per expert, over
// the tokens routed to it), captured over 8 sequences of 32 tokens of the demo corpus, and the full
// Hessians of the expert slices by entry name.
func moeImatrix(t *testing.T) ([]*calib.ImatrixEntry, map[string]*calib.Hessian) {
	t.Helper()
	all, full := fixtures.Imatrix(t, fixtures.Synth(t, fixtures.MoE), abs(t, "../recipes/demo-corpus.txt"), 8, 32)
	var es []*calib.ImatrixEntry
	for _, e := range all {
		if strings.Contains(e.Name, "_exps.") {
			es = append(es, e)
		}
	}
	for name := range full {
		if !strings.Contains(name, "_exps.") {
			delete(full, name)
		}
	}
	if len(es) != 2*len(moeExpertTensors) {
		t.Fatalf("%d expert tensor entries, want %d", len(es), 2*len(moeExpertTensors))
	}
	return es, full
}

func writeMoEImatrix(t *testing.T, es []*calib.ImatrixEntry, legacy bool) string {
	return fixtures.WriteImatrix(t, t.TempDir(), "moe", es, legacy, "demo-corpus.txt", 8)
}

// TestMoEBuild builds the synthetic MoE model end to end with RTN, then with an imatrix weighting
// the expert slices: the pack holds 2 layers x 3 tensors x 4 experts = 24 expert entries (plus the
// 8 attention weights), each named <name>#<e>; the stub owns the whole 3-D tensors and keeps the
// routers; the report counts the experts and says the pack was not screened; a second build
// executes nothing.
func TestMoEBuild(t *testing.T) {
	r := newRig(t)
	path := writeMoERecipe(t)
	out := filepath.Join(t.TempDir(), "out")
	ran, res, err := r.build(t, path, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) != len(res.Nodes) {
		t.Fatalf("first build executed %d of %d nodes", len(ran), len(res.Nodes))
	}
	ctx := context.Background()
	pr, err := pack.Open(ctx, filepath.Join(out, "tiny-moe.orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	experts := map[string]int{}
	var attn int
	for _, e := range pr.Entries() {
		if base, x, ok := pack.SplitExpert(e.Name); ok {
			experts[base]++
			if x < 0 || x >= 4 || e.N != 64 && e.N != 96 {
				t.Errorf("entry %s: expert %d, N %d", e.Name, x, e.N)
			}
			continue
		}
		if strings.Contains(e.Name, "ffn_gate_inp") {
			t.Errorf("the router %s is packed", e.Name)
		}
		attn++
	}
	pr.Close()
	if len(experts) != 6 || attn != 8 {
		t.Fatalf("pack: expert tensors %v and %d other entries, want 6 tensors of 4 experts and 8 attention weights", experts, attn)
	}
	for base, n := range experts {
		if n != 4 {
			t.Errorf("%s: %d expert entries, want 4", base, n)
		}
	}

	// The stub: every expert tensor and attention weight is a hole, the routers and norms are kept.
	owned := gguf.NameSet{}
	for l := 0; l < 2; l++ {
		for _, w := range append([]string{"attn_q", "attn_k", "attn_v", "attn_output"}, moeExpertTensors...) {
			owned[fmt.Sprintf("blk.%d.%s.weight", l, w)] = struct{}{}
		}
	}
	stub := filepath.Join(out, "tiny-moe.orkpack.gguf")
	if rep, err := gguf.VerifyStub(ctx, stub, owned); err != nil || rep.Owned != 14 {
		t.Errorf("stub against 14 owned tensors (6 of them 3-D): %v (%+v)", err, rep)
	}
	owned["blk.0.ffn_gate_inp.weight"] = struct{}{}
	if _, err := gguf.VerifyStub(ctx, stub, owned); err == nil || !strings.Contains(err.Error(), "blk.0.ffn_gate_inp.weight") {
		t.Errorf("the router is a hole in the stub, or the check cannot tell: %v", err)
	}

	rep := readReport(t, out)
	if rep.Totals.ExpertEntries != 24 || rep.Totals.ExpertTensors != 6 || rep.Totals.Weights != 32 || rep.Screen != nil {
		t.Errorf("report totals %+v (screen %v), want 24 expert entries of 6 tensors, 32 weights, no screen", rep.Totals, rep.Screen)
	}
	if rep.Verify.StubOwned != 14 {
		t.Errorf("verify-local: stub owned %d, want 14", rep.Verify.StubOwned)
	}
	summary, _ := os.ReadFile(filepath.Join(out, "summary.txt"))
	if !strings.Contains(string(summary), "not screened") || !strings.Contains(string(summary), "24 expert-slice entries of 6 MoE tensors") {
		t.Errorf("summary:\n%s", summary)
	}

	if ran, _, err := r.build(t, path, out); err != nil || len(ran) != 0 {
		t.Fatalf("second build executed %v (err %v), want nothing", ran, err)
	}

	// With an imatrix (captured per expert from the model) on the FFN scheme: exactly the 24 expert
	// finalize nodes bind it (the router is not packed, attention stays plain); their qerr is the
	// importance-weighted one, and their full-Hessian-weighted error is lower than plain RTN's for
	// most slices.
	plainQ := map[string]float64{}
	for _, w := range rep.Weights {
		plainQ[w.Name] = w.QErr
	}
	es, full := moeImatrix(t)
	modelPath := fixtures.Synth(t, fixtures.MoE)
	plainErr := hessianErrors(t, filepath.Join(out, "tiny-moe.orkpack"), modelPath, full)
	for _, legacy := range []bool{false, true} {
		im := writeMoEImatrix(t, es, legacy)
		out2 := filepath.Join(t.TempDir(), "out")
		ran, _, err = r.build(t, path, out2, "imatrix="+im, "schemes.0.importance=imatrix")
		if err != nil {
			t.Fatal(err)
		}
		var fin []string
		for _, id := range ran {
			if strings.HasPrefix(id, "rtn-tile:") {
				fin = append(fin, id)
				if !strings.Contains(id, "_exps.weight#") {
					t.Errorf("legacy %v: %s re-ran with the imatrix", legacy, id)
				}
			}
		}
		if len(fin) != 24 {
			t.Errorf("legacy %v: %d rtn-tile nodes ran, want the 24 expert slices", legacy, len(fin))
		}
		changed := 0
		for _, w := range readReport(t, out2).Weights {
			if strings.Contains(w.Name, "#") && w.QErr != plainQ[w.Name] {
				changed++
			}
		}
		if changed != 24 {
			t.Errorf("legacy %v: %d of 24 expert entries have an importance-weighted qerr", legacy, changed)
		}
		imErr := hessianErrors(t, filepath.Join(out2, "tiny-moe.orkpack"), modelPath, full)
		better := 0
		var sum float64
		for name, e := range imErr {
			sum += e / plainErr[name]
			if e < plainErr[name] {
				better++
			}
		}
		t.Logf("legacy %v: imatrix RTN has a lower full-H-weighted error on %d of 24 expert slices (mean ratio %.3f)", legacy, better, sum/24)
		if better*2 <= 24 {
			t.Errorf("legacy %v: imatrix RTN lower on only %d of 24 expert slices", legacy, better)
		}
	}
}

// TestMoEPlanErrors: an imatrix whose expert count differs from the model's, or that lacks a weight's
// entry, is a plan error naming the file, the tensor and the expected shape; a missing imatrix file
// names the key and the path.
func TestMoEPlanErrors(t *testing.T) {
	path := writeMoERecipe(t)
	plan := func(sets ...string) error {
		rec, err := recipe.Load(path, sets...)
		if err != nil {
			return err
		}
		tg, err := build.New(rec, build.WithMemoryBudget(2<<30))
		if err != nil {
			return err
		}
		_, err = tg.Graph(context.Background())
		return err
	}
	es, _ := moeImatrix(t)
	for _, e := range es {
		e.Sum2, e.Counts = e.Sum2[:3], e.Counts[:3] // 3 experts, the model has 4
	}
	for _, legacy := range []bool{false, true} {
		im := writeMoEImatrix(t, es, legacy)
		err := plan("imatrix="+im, "schemes.0.importance=imatrix")
		if !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), im) || !strings.Contains(err.Error(), "blk.0.ffn_gate_exps.weight") ||
			!strings.Contains(err.Error(), "K=64 x 4 matrices") {
			t.Errorf("legacy %v: imatrix with 3 experts: %v", legacy, err)
		}
	}
	es, _ = moeImatrix(t)
	im := writeMoEImatrix(t, es[:5], false) // no blk.1.ffn_down_exps.weight
	if err := plan("imatrix="+im, "schemes.0.importance=imatrix"); !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), im) ||
		!strings.Contains(err.Error(), "no entry for blk.1.ffn_down_exps.weight") {
		t.Errorf("imatrix without an entry: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "none.imatrix")
	if err := plan("imatrix="+missing, "schemes.0.importance=imatrix"); !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), "imatrix") ||
		!strings.Contains(err.Error(), missing) {
		t.Errorf("missing imatrix: %v", err)
	}
}
