//go:build linux

package stages_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/stages"
)

// TestRouteMemory measures a route node's peak RSS in a fresh process (as TestCalibrateMemory does for
// calibrate) against what it declares (stages.RouteMemory: every chunk's hidden states, one block's
// weights as held, one batch's activations): a Q8_0 MoE model of 2 blocks of 8 experts (n_embd 512, n_ff
// 704) routing tinystories_sample.txt in chunks of 128 tokens, max_chunks sized from the text as the
// planner sizes it.
func TestRouteMemory(t *testing.T) {
	if runStageMemChildIfAsked(t) {
		return
	}
	if testing.Short() {
		t.Skip("synthesizes a model and routes a text in a child process")
	}
	requireMemoryMeasure(t)
	sp := stages.SynthParams{Layers: 2, Embd: 512, FF: 704, Heads: 8, HeadsKV: 2, Vocab: 512, Ctx: 256, Type: "Q8_0", Seed: 3, Experts: 8, ExpertsUsed: 2}
	synth, _ := json.Marshal(sp)
	modelPath := mustExec(t, "synth", string(synth), nil)["model.gguf"]
	text := testfiles.Path(t, "tinystories_sample.txt")
	st, err := os.Stat(text)
	if err != nil {
		t.Fatal(err)
	}
	p := stages.RouteParams{Shape: shapeOfFile(t, modelPath), Ctx: 128, MaxChunks: int((st.Size() + 2) / 128), TextName: "tinystories_sample.txt"}
	declared := stages.RouteMemory(p.Shape, p.MaxChunks, p.Ctx)
	res, out := measureStage(t, "TestRouteMemory", "route", p, map[string]string{"model": modelPath, "text": text}, declared)
	measured := res.HWMKB << 10
	t.Logf("route, %d chunks at most of %d tokens: %.1fs; peak RSS (VmHWM) %.3f GiB (binary alone %d KB); declared %.3f GiB; measured/declared %.3f",
		p.MaxChunks, p.Ctx, res.Seconds, gib(measured), res.BaseKB, gib(declared), float64(measured)/float64(declared))
	if measured > declared {
		t.Errorf("measured peak %d bytes > declared RouteMemory %d bytes", measured, declared)
	}
	if _, err := os.Stat(filepath.Join(out, "routing.json")); err != nil {
		t.Error(err)
	}
}
