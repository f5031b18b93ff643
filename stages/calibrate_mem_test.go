//go:build linux

package stages_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/stages"
)

// The calibrate memory test measures what a calibrate node really holds at its peak against what it
// declares (stages.CalibrateMemory, which the planner sizes windows by and the engine schedules by), as
// TestFinalizeMemory does for finalize: each case runs the stage in a fresh process (measureStage), so
// the measured VmHWM is the node's peak plus the process's fixed cost, as a build process running it
// alone would see. Like a build process (orkpipe build sets a Go memory limit below --mem), the child
// runs under a Go memory limit: the declared peak less childNonGo, so garbage is collected before it
// counts; live memory above the declared peak cannot be collected and shows in VmHWM.

func TestCalibrateMemory(t *testing.T) {
	if runStageMemChildIfAsked(t) {
		return
	}
	if testing.Short() {
		testfiles.SkipShort(t, "synthesizes models and calibrates them in child processes")
	}
	requireMemoryMeasure(t)
	cases := []struct {
		name                string
		embd, ff, heads, kv int
		typ                 string
		seqs, ctx           int
		long                bool
		qwen35              bool // a qwen35 model of 4 blocks (3 Gated DeltaNet, 1 gated attention), all in the window
	}{
		// 4 x 128 tokens are one batch of rows (calib.BatchRows): each Hessian's only update stays
		// pending and its file is encoded from the rows, so no K x K matrix is ever allocated.
		{name: "q8_0-1024x2816", embd: 1024, ff: 2816, heads: 8, kv: 2, typ: "Q8_0", seqs: 4, ctx: 128},
		{name: "f16-1024x2816", embd: 1024, ff: 2816, heads: 8, kv: 2, typ: "F16", seqs: 4, ctx: 128},
		{name: "qwen35-q8_0-1024x2816-4-layers", embd: 1024, ff: 2816, heads: 8, kv: 2, typ: "Q8_0", seqs: 4, ctx: 128, qwen35: true},
		// 8 x 128 tokens are two batches: every Hessian is allocated and updated, the declared peak's
		// main term (the built-in recipes calibrate on 32 x 512 tokens).
		{name: "q8_0-1024x2816-dense", embd: 1024, ff: 2816, heads: 8, kv: 2, typ: "Q8_0", seqs: 8, ctx: 128},
		{name: "qwen35-q8_0-1024x2816-4-layers-dense", embd: 1024, ff: 2816, heads: 8, kv: 2, typ: "Q8_0", seqs: 8, ctx: 128, qwen35: true},
		// One layer of the 27B shape, as a --mem 4GiB build calibrates it, on one batch and on two.
		{name: "q8_0-27B-one-layer", embd: 5120, ff: 17408, heads: 40, kv: 8, typ: "Q8_0", seqs: 4, ctx: 128, long: true},
		{name: "q8_0-27B-one-layer-dense", embd: 5120, ff: 17408, heads: 40, kv: 8, typ: "Q8_0", seqs: 8, ctx: 128, long: true},
	}
	corpus := testfiles.Path(t, "stories-calib.txt")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.long {
				testfiles.Long(t, "the 27B one-layer calibration takes up to minutes and up to 3.5 GiB (its declared peak)")
			}
			sp := stages.SynthParams{Layers: 1, Embd: c.embd, FF: c.ff, Heads: c.heads, HeadsKV: c.kv, Vocab: 512, Ctx: 256, Type: c.typ, Seed: 3}
			if c.qwen35 {
				sp.Arch, sp.Layers, sp.HeadDim, sp.SSMHeadDim, sp.SSMKHeads, sp.SSMVHeads = "qwen35", 4, 128, 128, 4, 8
			}
			synth, _ := json.Marshal(sp)
			modelPath := mustExec(t, "synth", string(synth), nil)["model.gguf"]
			tokens := mustExec(t, "tokenize", fmt.Sprintf(`{"sequences":%d,"ctx":%d,"corpus_name":"stories-calib.txt"}`, c.seqs, c.ctx),
				map[string]string{"model": modelPath, "corpus": corpus})["tokens"]
			shape := shapeOfFile(t, modelPath)
			if want := c.typ; want == "F32" && shape.WeightType != "" || want != "F32" && shape.WeightType != want {
				t.Fatalf("shape of a %s model has weight_type %q", c.typ, shape.WeightType)
			}
			end := sp.Layers
			p := stages.CalibrateParams{Shape: shape, Start: 0, End: end, Sequences: c.seqs, Ctx: c.ctx, Hidden: true}
			declared := stages.CalibrateMemory(shape, 0, end, c.seqs, c.ctx)
			res, out := measureStage(t, "TestCalibrateMemory", "calibrate", p, map[string]string{"model": modelPath, "tokens": tokens}, declared)
			float := shape
			float.WeightType = ""
			declaredFloat := stages.CalibrateMemory(float, 0, end, c.seqs, c.ctx)
			measured := res.HWMKB << 10
			t.Logf("calibrate[0,%d) %s n_embd %d n_ff %d, %d x %d tokens: %.1fs (Go memory limit %.3f GiB); peak RSS (VmHWM) %d KB = %.3f GiB (binary alone %d KB, Go runtime holds %.3f GiB at the end, VmRSS %d KB; live heap at most %.3f GiB, %d GCs); declared %.3f GiB (with float32 weights it would be %.3f GiB); measured/declared %.3f", end,
				c.typ, c.embd, c.ff, c.seqs, c.ctx, res.Seconds, gib(declared-childNonGo), res.HWMKB, gib(measured), res.BaseKB, gib(int64(res.GoBytes)), res.RSSKB, gib(int64(res.LiveMax)), res.GCs, gib(declared), gib(declaredFloat), float64(measured)/float64(declared))
			if measured > declared {
				t.Errorf("measured peak %d bytes > declared CalibrateMemory %d bytes (%.3f x)", measured, declared, float64(measured)/float64(declared))
			}
			if st, err := os.Stat(filepath.Join(out, "h.0.ffn_down")); err != nil || st.Size() != calib.HessianFileSize(c.ff) {
				t.Errorf("calibrate output h.0.ffn_down: %v (size %v), want a %d x %d Hessian", err, st, c.ff, c.ff)
			}
		})
	}
}
