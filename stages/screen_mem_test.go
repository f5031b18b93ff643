//go:build linux

package stages_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/ork/pack"
	"orkpipe/stages"
)

// TestScreenMemory measures a screen node's peak RSS in a fresh process (as TestCalibrateMemory does
// for calibrate) against what it declares (stages.ScreenMemory: the source's weights as held, Q8_0 kept
// encoded, two blocks of them with their emulated codes, the hidden states of a group of chunks, the MoE
// experts' scratch for several chunks at once, the emulation's scratch of the widest entry), with the
// parameters a build's screen node has: every entry's geometry declared (Emulated, from each entry's
// FinalizeParams as the planner lists them) and text_chunks from the text's size. Q8_0 models — a
// qwen35 of 4 blocks (3 Gated DeltaNet, 1 gated attention) and a llama of 2, every matmul weight packed
// by RTN (I4, 32-wide groups), screened on one chunk of tinystories_sample.txt at ctx 128; an lfm2moe
// of 3 blocks (16 experts of 512 rows, top-4) with every routed expert's slice packed too (I8_ROT,
// Hadamard-rotated: the pack's experts, emulated, take the tokens of several chunks at once, as the
// float model's do) on all 19 chunks.
func TestScreenMemory(t *testing.T) {
	if runStageMemChildIfAsked(t) {
		return
	}
	if testing.Short() {
		testfiles.SkipShort(t, "synthesizes models, packs them and screens them in child processes")
	}
	requireMemoryMeasure(t)
	text := testfiles.Path(t, "tinystories_sample.txt")
	for _, c := range []struct {
		name   string
		synth  stages.SynthParams
		chunks int
	}{
		{"qwen35-q8_0-1024x2816-4-layers", stages.SynthParams{Arch: "qwen35", Layers: 4, Embd: 1024, FF: 2816, Heads: 8, HeadsKV: 2, HeadDim: 128, Vocab: 512, Ctx: 256,
			Type: "Q8_0", Seed: 3, SSMHeadDim: 128, SSMKHeads: 4, SSMVHeads: 8}, 1},
		{"llama-q8_0-1024x2816-2-layers", stages.SynthParams{Layers: 2, Embd: 1024, FF: 2816, Heads: 8, HeadsKV: 2, Vocab: 512, Ctx: 256, Type: "Q8_0", Seed: 3}, 1},
		{"lfm2moe-q8_0-1024-16x512-3-layers-all-chunks", stages.SynthParams{Arch: "lfm2moe", Layers: 3, Embd: 1024, FF: 2816, FFExp: 512, Experts: 16, ExpertsUsed: 4,
			DenseLead: 1, AttnLayers: []int{1}, Heads: 8, HeadsKV: 2, Vocab: 512, Ctx: 256, Type: "Q8_0", Seed: 3}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synth, _ := json.Marshal(c.synth)
			modelPath := mustExec(t, "synth", string(synth), nil)["model.gguf"]
			shape := shapeOfFile(t, modelPath)
			cfg := shape.Config()
			var names []string
			var es []stages.EmulatedEntry
			entries := map[string]string{}
			for l := range cfg.NLayer {
				for _, s := range cfg.Sites(l) {
					if !calib.Captured(s) {
						continue
					}
					for _, w := range s.Weights {
						for e := range max(1, s.Experts) {
							fp := stages.FinalizeParams{Tensor: s.Tensor(l, w), Method: "rtn", DType: "I4_NATIVE", Group: 32, Rotation: "none", ActBits: 8, N: w.N, K: s.Width}
							name := fp.Tensor
							if s.Experts > 0 {
								fp.Expert, fp.DType, fp.Rotation, fp.Seed = &e, "I8_ROT", "hadamard", 1
								name += "#" + strconv.Itoa(e)
							}
							rp, _ := json.Marshal(stages.RTNTileParams{Finalize: fp, Nibbles: "low-first"})
							names = append(names, name)
							es = append(es, fp.Emulated(name))
							entries["e."+name] = mustExec(t, "rtn-tile", string(rp), map[string]string{"model": modelPath})["entry"]
						}
					}
				}
			}
			wp, _ := json.Marshal(stages.WritePackParams{Board: "rk3588", Entries: names, MaxEntryBytes: 64 << 20})
			packPath := mustExec(t, "write-orkpack", string(wp), entries)["pack"]
			st, err := os.Stat(text)
			if err != nil {
				t.Fatal(err)
			}
			// As the planner sets them (pipelines/build): every entry's geometry, the chunks the text fills.
			p := stages.ScreenParams{Shape: shape, Ctx: 128, Chunks: c.chunks, TextName: "tinystories_sample.txt", Emulated: stages.EmulatedEntries(es)}
			p.TextChunks = int((st.Size() + 2) / int64(p.Ctx))
			declared := stages.ScreenMemory(shape, p.Ctx, p.EvalChunks(), p.Emulated)
			// The declaration covers every entry the pack holds, as the planner's does.
			r, err := pack.Open(context.Background(), packPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range r.Entries() {
				ee := stages.EmulatedEntry{DType: e.DType.String(), N: e.N, KP: e.K, Group: e.Group, Block: e.Rotation.Block, Expert: strings.Contains(e.Name, "#")}
				if !slices.Contains(p.Emulated, ee) {
					t.Errorf("pack entry %s (%+v): not among the entries the screen declares", e.Name, ee)
				}
			}
			r.Close()
			res, out := measureStage(t, "TestScreenMemory", "screen", p, map[string]string{"model": modelPath, "pack": packPath, "text": text}, declared)
			measured := res.HWMKB << 10
			t.Logf("screen of %d entries (%d geometries), at most %d chunks of %d tokens: %.1fs; peak RSS (VmHWM) %.3f GiB (binary alone %d KB); declared %.3f GiB (%.3f for any number of chunks); measured/declared %.3f",
				len(names), len(p.Emulated), p.EvalChunks(), p.Ctx, res.Seconds, gib(measured), res.BaseKB, gib(declared), gib(stages.ScreenMemory(shape, p.Ctx, 0, p.Emulated)), float64(measured)/float64(declared))
			if measured > declared {
				t.Errorf("measured peak %d bytes > declared ScreenMemory %d bytes", measured, declared)
			}
			if _, err := os.Stat(filepath.Join(out, "screen.json")); err != nil {
				t.Error(err)
			}
		})
	}
}
