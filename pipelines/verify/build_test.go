package verify_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
	"orkpipe/pipelines/verify"
)

// A tiny synthetic model built by the real build pipeline (recipe -> DAG -> pack, stub, report.json,
// provenance.json): its output directory verifies as is, so verify reads what the build writes.
const tinyRecipe = `name: tiny
source:
  synth: {layers: 2, n_embd: 64, n_ff: 96, n_head: 4, n_head_kv: 2, vocab: 360, ctx: 64, type: F16, seed: 3}
calibration:
  corpus: %s
  sequences: 4
  ctx: 32
  mode: oneshot
  window: 1
schemes:
  - match: 'blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight'
    method: rtn
    dtype: I4_NATIVE
    group: 32
screen:
  text: %s
  ctx: 32
`

func TestVerifyRealBuildOutput(t *testing.T) {
	ctx := context.Background()
	corpus, _ := filepath.Abs("../recipes/demo-corpus.txt")
	text, _ := filepath.Abs("../recipes/demo-eval.txt")
	rp := filepath.Join(t.TempDir(), "tiny.yaml")
	if err := os.WriteFile(rp, []byte(fmt.Sprintf(tinyRecipe, corpus, text)), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := recipe.Load(rp)
	if err != nil {
		t.Fatal(err)
	}
	store, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	eng, err := engine.New(store, engine.WithJobs(2), engine.WithMemoryBudget(2<<30))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := build.New(rec, build.WithMemoryBudget(2<<30))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tg.Graph(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := eng.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := eng.Build(ctx, tg.Name(), plan, engine.BuildOptions{OutDir: out}); err != nil {
		t.Fatal(err)
	}
	res, err := verify.Dir(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.OK() {
		t.Fatalf("the build's own output does not verify: %+v", res.Report.Checks)
	}
	if filepath.Base(res.Files.Pack) != "tiny.orkpack" {
		t.Errorf("pack %s", res.Files.Pack)
	}
}
