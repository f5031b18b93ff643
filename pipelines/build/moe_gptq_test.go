package build_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/pipelines/build"
	"orkpipe/pipelines/recipe"
)

// moeGPTQRecipe calibrates the synthetic MoE model (4 sequences of 32 tokens) and quantizes the
// expert slices with GPTQ, each with its own expert's Hessian; the pack is screened.
const moeGPTQRecipe = `name: tiny-moe-gptq
source:
  synth: {layers: 2, n_embd: 64, n_ff: 96, n_head: 4, n_head_kv: 2, vocab: 360, ctx: 64, type: F16, seed: 5, n_expert: 4, n_expert_used: 2}
calibration:
  corpus: %s
  sequences: 4
  ctx: 32
  mode: %s
  window: 1
schemes:
  - match: 'blk\.\d+\.ffn_\w+_exps\.weight'
    method: gptq
    dtype: I4
    group: 32
  - match: 'blk\.\d+\.attn_\w+\.weight'
    method: gptq
    dtype: I4_NATIVE
screen:
  text: %s
  ctx: 32
`

// TestMoEGPTQ builds the synthetic MoE model with GPTQ on every expert slice (engineer F's per-expert
// Hessians from calibrate), in both calibration modes, and screens it (F's MoE forward).
func TestMoEGPTQ(t *testing.T) {
	for _, mode := range []string{"oneshot", "sequential"} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			p := filepath.Join(t.TempDir(), "m.yaml")
			os.WriteFile(p, []byte(fmt.Sprintf(moeGPTQRecipe, abs(t, "../recipes/demo-corpus.txt"), mode, abs(t, "../recipes/demo-eval.txt"))), 0o644)
			out := filepath.Join(t.TempDir(), "out")
			ran, _, err := r.build(t, p, out)
			if err != nil {
				t.Fatal(err)
			}
			var fin int
			for _, id := range ran {
				if strings.HasPrefix(id, "finalize:") && strings.Contains(id, "#") {
					fin++
				}
			}
			rep := readReport(t, out)
			t.Logf("%s: %d expert finalize nodes; screen %+v", mode, fin, rep.Screen)
			if fin != 24 || rep.Screen == nil || rep.Totals.ExpertEntries != 24 {
				t.Errorf("expert finalize nodes %d, report %+v", fin, rep.Totals)
			}
			// Each expert slice bound its own expert's Hessian: per layer, gate and up of expert e
			// share one (same input), and the 4 experts' and down's Hessians are all different.
			rec, err := recipe.Load(p)
			if err != nil {
				t.Fatal(err)
			}
			tg, _ := build.New(rec, build.WithMemoryBudget(2<<30))
			g, err := tg.Graph(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			plan, err := r.eng.Plan(g)
			if err != nil {
				t.Fatal(err)
			}
			sts, err := r.eng.Status(context.Background(), plan)
			if err != nil {
				t.Fatal(err)
			}
			hess := map[string]string{}
			for _, st := range sts {
				if !st.Cached || st.Material == nil {
					t.Errorf("%s: not cached after the build", st.ID)
					continue
				}
				if strings.HasPrefix(st.ID, "finalize:") && strings.Contains(st.ID, "#") {
					hess[strings.TrimPrefix(st.ID, "finalize:")] = st.Material.Inputs["hessian"].String()
				}
			}
			for l := 0; l < 2; l++ {
				seen := map[string]string{}
				for e := 0; e < 4; e++ {
					name := func(w string) string { return fmt.Sprintf("blk.%d.%s.weight#%d", l, w, e) }
					g, u, d := hess[name("ffn_gate_exps")], hess[name("ffn_up_exps")], hess[name("ffn_down_exps")]
					if g == "" || g != u {
						t.Errorf("layer %d expert %d: gate and up bound Hessians %q and %q, want one shared", l, e, g, u)
					}
					for _, h := range []string{g, d} {
						if prev, dup := seen[h]; dup {
							t.Errorf("layer %d expert %d: Hessian %s already bound by %s", l, e, h, prev)
						}
						seen[h] = fmt.Sprint(e)
					}
				}
			}
		})
	}
}
