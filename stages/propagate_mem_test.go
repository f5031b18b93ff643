//go:build linux

package stages_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/stages"
)

// TestPropagateMemory measures a propagate node's peak RSS in a fresh process (as TestCalibrateMemory
// does for calibrate) against what it declares (stages.PropagateMemory, which the planner sizes
// sequential windows by): Q8_0 models — a llama of 2 blocks and an lfm2moe of 4 (2 dense, 2 of 16
// experts) — whose window is every block, every matmul weight finalized by RTN in a mix of the
// dtypes a recipe gives them: rotated int4 in 32-wide groups, int8 by row, int4 unrotated, F16, and
// the experts int8 (the seed MoE recipe's tier). The declaration counts each finalized weight as its
// dtype holds it; before it did not know the dtypes and counted 5 bytes a value beside the source's
// encoded weight, several times what such a window holds.
func TestPropagateMemory(t *testing.T) {
	if runStageMemChildIfAsked(t) {
		return
	}
	if testing.Short() {
		testfiles.SkipShort(t, "synthesizes models, finalizes their weights and propagates them in child processes")
	}
	requireMemoryMeasure(t)
	corpus := testfiles.Path(t, "stories-calib.txt")
	for _, c := range []struct {
		name  string
		synth stages.SynthParams
	}{
		{"llama-q8_0-1024x2816-2-layers", stages.SynthParams{Layers: 2, Embd: 1024, FF: 2816, Heads: 8, HeadsKV: 2, Vocab: 512, Ctx: 256, Type: "Q8_0", Seed: 3}},
		{"lfm2moe-q8_0-1024-16-experts-4-layers", stages.SynthParams{Arch: "lfm2moe", Layers: 4, Embd: 1024, FF: 2816, FFExp: 768, Experts: 16, ExpertsUsed: 2,
			DenseLead: 2, Heads: 8, HeadsKV: 2, AttnLayers: []int{1, 3}, Vocab: 512, Ctx: 256, Type: "Q8_0", Seed: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synth, _ := json.Marshal(c.synth)
			modelPath := mustExec(t, "synth", string(synth), nil)["model.gguf"]
			const seqs, ctxLen = 4, 128
			tokens := mustExec(t, "tokenize", fmt.Sprintf(`{"sequences":%d,"ctx":%d,"corpus_name":"stories-calib.txt"}`, seqs, ctxLen),
				map[string]string{"model": modelPath, "corpus": corpus})["tokens"]
			shape := shapeOfFile(t, modelPath)
			cfg := shape.Config()
			p := stages.PropagateParams{Shape: shape, Start: 0, End: cfg.NLayer, Sequences: seqs, Ctx: ctxLen}
			inputs := map[string]string{"model": modelPath, "tokens": tokens}
			var values int64
			for l := range cfg.NLayer {
				for _, s := range cfg.Sites(l) {
					if !calib.Captured(s) {
						continue
					}
					for _, m := range s.Weights {
						for e := range max(1, s.Experts) {
							fp := stages.FinalizeParams{Tensor: s.Tensor(l, m), Method: "rtn", N: m.N, K: s.Width, ActBits: 8}
							switch {
							case s.Experts > 0:
								fp.DType, fp.Rotation = "I8", "none"
								fp.Expert = &e
							case m.Name == "attn_output":
								fp.DType, fp.Method, fp.Rotation = "F16", "none", "none"
							case m.Name == "attn_q" || m.Name == "attn_k" || m.Name == "attn_v":
								fp.DType, fp.Rotation = "I8", "none"
							case m.Name == "ffn_down":
								fp.DType, fp.Group, fp.Rotation = "I4_NATIVE", 32, "none"
							default:
								fp.DType, fp.Group, fp.Rotation = "I4_ROT_A8", 32, "hadamard"
							}
							name := fp.Tensor
							if s.Experts > 0 {
								name += "#" + strconv.Itoa(e)
							}
							b, _ := json.Marshal(fp)
							inputs["w."+name] = mustExec(t, "finalize", string(b), map[string]string{"model": modelPath})["weight"]
							p.Weights = append(p.Weights, stages.WindowWeight{Name: name, DType: fp.DType, KP: fp.KP(), Group: fp.Group, Block: fp.Emulated(name).Block})
							values += int64(m.N) * int64(s.Width)
						}
					}
				}
			}
			declared := stages.PropagateMemory(shape, p.Start, p.End, seqs, ctxLen, p.Weights)
			source := stages.PropagateMemory(shape, p.Start, p.End, seqs, ctxLen, nil) // the window's weights as the source holds them
			res, out := measureStage(t, "TestPropagateMemory", "propagate", p, inputs, declared)
			measured := res.HWMKB << 10
			t.Logf("propagate[0,%d) of %d finalized weights (%d values), %d x %d tokens: %.1fs; peak RSS (VmHWM) %.3f GiB (binary alone %d KB); declared %.3f GiB (the source's weights alone: %.3f GiB; 5 bytes a value beside them, the old declaration: %.3f GiB); measured/declared %.3f",
				p.End, len(p.Weights), values, seqs, ctxLen, res.Seconds, gib(measured), res.BaseKB, gib(declared), gib(source), gib(source+5*values), float64(measured)/float64(declared))
			if measured > declared {
				t.Errorf("measured peak %d bytes > declared PropagateMemory %d bytes", measured, declared)
			}
			if st, err := os.Stat(filepath.Join(out, "hidden")); err != nil || st.Size() < int64(seqs*ctxLen*cfg.NEmbd*4) {
				t.Errorf("propagate output hidden: %v (size %v), want %d sequences of %d hidden states", err, st, seqs, ctxLen)
			}
		})
	}
}
