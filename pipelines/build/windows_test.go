package build_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"orkpipe/ork/calib"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/recipe"
	"orkpipe/stages"
)

// TestAutoWindowsFitHybridBlocks: with window: auto, a model whose later blocks need more memory
// than its first ones (lfm2moe: two dense blocks, then MoE blocks with per-expert Hessians) gets
// later windows shortened to fit --mem, where sizing every window like the first one planned a
// window over the budget and refused the recipe. Every window fits, together they cover every block
// once, in order, and a model of alike blocks keeps windows of one size.
func TestAutoWindowsFitHybridBlocks(t *testing.T) {
	const seqs, ctxLen = 4, 64
	sp := stages.SynthParams{Arch: "lfm2moe", Layers: 8, Embd: 512, FF: 512, FFExp: 512, Experts: 32, ExpertsUsed: 2, DenseLead: 2,
		Heads: 4, HeadsKV: 2, AttnLayers: []int{2, 6}, Vocab: 512, Ctx: 4096, Type: "F32", Seed: 1}
	shape := stages.ShapeOf(sp.Config())
	mem := func(a, b int) int64 {
		return max(stages.CalibrateMemory(shape, a, b, seqs, ctxLen), stages.PropagateMemory(shape, a, b, seqs, ctxLen, packed(t, shape, a, b)))
	}
	budget := mem(0, 4) // two dense and two MoE blocks
	if mem(4, 8) <= budget || mem(0, 5) <= budget {
		t.Fatalf("premise: windows [0,4) %d, [0,5) %d, [4,8) %d bytes against a budget of %d: the test needs [0,4) to be the first window and [4,8) not to fit",
			mem(0, 4), mem(0, 5), mem(4, 8), budget)
	}
	rec := fmt.Sprintf(`name: hybrid-windows
source:
  synth: {arch: lfm2moe, layers: 8, n_embd: 512, n_ff: 512, n_ff_exp: 512, n_expert: 32, n_expert_used: 2, leading_dense_block_count: 2, n_head: 4, n_head_kv: 2, attention_layers: [2, 6], vocab: 512, ctx: 4096, type: F32, seed: 1}
calibration: {corpus: %s, sequences: %d, ctx: %d, mode: sequential, window: auto}
schemes:
  - {match: 'blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|shortconv\.in_proj|shortconv\.out_proj|ffn_gate|ffn_up|ffn_down)(_exps)?\.weight', method: gptq, dtype: I4_ROT_A8, group: 32}
`, abs(t, "../recipes/demo-corpus.txt"), seqs, ctxLen)
	p := filepath.Join(t.TempDir(), "hybrid.yaml")
	if err := os.WriteFile(p, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := recipe.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := build.New(r, build.WithMemoryBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tg.Graph(context.Background())
	if err != nil {
		t.Fatalf("window: auto at %d bytes: %v", budget, err)
	}
	win := regexp.MustCompile(`^calibrate\[(\d+),(\d+)\)$`)
	next, sizes := 0, []int{}
	for _, id := range nodeIDs(g) {
		m := win.FindStringSubmatch(id)
		if m == nil {
			continue
		}
		a, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[2])
		sizes = append(sizes, b-a)
		if mem(a, b) > budget {
			t.Errorf("window %s needs %d bytes, over the budget of %d", id, mem(a, b), budget)
		}
		if a != next {
			t.Errorf("window %s: want one starting at block %d", id, next)
		}
		next = b
	}
	if next != sp.Layers || len(sizes) == 0 || sizes[0] != 4 || sizes[1] >= 4 {
		t.Errorf("windows of %v layers covering blocks [0,%d), want a first window of 4 and shorter ones after it covering all %d", sizes, next, sp.Layers)
	}
	t.Logf("window sizes %v at a budget of %.1f MiB", sizes, float64(budget)/(1<<20))
}

// packed returns every matmul weight of blocks [a, b) (every expert slice; not the MoE router) as the
// recipe above packs it: I4_ROT_A8, 32-wide groups, rotated.
func packed(t testing.TB, shape stages.ModelShape, a, b int) []stages.WindowWeight {
	c := shape.Config()
	var ws []stages.WindowWeight
	for l := a; l < b; l++ {
		for _, s := range c.Sites(l) {
			if !calib.Captured(s) {
				continue
			}
			for _, m := range s.Weights {
				for e := range max(1, s.Experts) {
					name := s.Tensor(l, m)
					if s.Experts > 0 {
						name += "#" + strconv.Itoa(e)
					}
					kp, err := stages.PaddedK(s.Width, "hadamard")
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					block := stages.FinalizeParams{Tensor: name, DType: "I4_ROT_A8", Group: 32, Rotation: "hadamard", N: 1, K: s.Width}.Emulated(name).Block
					ws = append(ws, stages.WindowWeight{Name: name, DType: "I4_ROT_A8", KP: kp, Group: 32, Block: block})
				}
			}
		}
	}
	return ws
}

// TestCalibrationSkipsUnreadHessians: a recipe that packs an MoE model's experts by round-to-nearest
// and its other weights by GPTQ plans calibrate nodes that skip exactly the expert sites (no weight
// reads their Hessians), and the build runs; when the experts are GPTQ'd too, nothing is skipped and
// the calibrate nodes' parameters are those of a build before Skip existed (no "skip" key).
func TestCalibrationSkipsUnreadHessians(t *testing.T) {
	rec := fmt.Sprintf(`name: skip-hessians
source:
  synth: {arch: lfm2moe, layers: 4, n_embd: 64, n_ff: 96, n_ff_exp: 64, n_expert: 4, n_expert_used: 2, leading_dense_block_count: 1, n_head: 4, n_head_kv: 2, attention_layers: [1, 3], vocab: 400, ctx: 64, type: F32, seed: 2}
calibration: {corpus: %s, sequences: 2, ctx: 32, mode: sequential, window: 2}
schemes:
  - {match: 'blk\.\d+\.ffn_\w+_exps\.weight', method: rtn, dtype: I8}
  - {match: 'blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|shortconv\.in_proj|shortconv\.out_proj|ffn_gate|ffn_up|ffn_down)\.weight', method: gptq, dtype: I4_ROT_A8, group: 32}
`, abs(t, "../recipes/demo-corpus.txt"))
	p := filepath.Join(t.TempDir(), "skip.yaml")
	if err := os.WriteFile(p, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRig(t)
	for _, c := range []struct {
		name string
		sets []string
		want map[string]string
	}{
		{"experts rtn", nil, map[string]string{
			"calibrate[0,2)": `"skip":["h.1.ffn_down_exps","h.1.ffn_gate_up_exps"]`,
			"calibrate[2,4)": `"skip":["h.2.ffn_down_exps","h.2.ffn_gate_up_exps","h.3.ffn_down_exps","h.3.ffn_gate_up_exps"]`}},
		{"experts gptq", []string{"schemes.0.method=gptq", "schemes.0.dtype=I4_ROT_A8", "schemes.0.group=32"}, map[string]string{
			"calibrate[0,2)": "", "calibrate[2,4)": ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A calibrate node's key material is known once its tokens are: build, then read the plan.
			if _, _, err := r.build(t, p, filepath.Join(t.TempDir(), "out"), c.sets...); err != nil {
				t.Fatal(err)
			}
			st, err := planStatus(t, r, p, c.sets...)
			if err != nil {
				t.Fatal(err)
			}
			for id, want := range c.want {
				m := st[id].Material
				switch {
				case m == nil:
					t.Errorf("%s: not planned", id)
				case want == "" && strings.Contains(string(m.Params), `"skip"`):
					t.Errorf("%s: params %s skip a site that a GPTQ weight reads", id, m.Params)
				case want != "" && !strings.Contains(string(m.Params), want):
					t.Errorf("%s: params %s, want %s", id, m.Params, want)
				}
			}
		})
	}
}
