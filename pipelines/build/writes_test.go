package build_test

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/engine"
)

// TestDeclaredWrites: what the planner says each node writes into the store (engine.Node.Writes, the
// sum plan and build check against the cache's free space) is what it wrote: under by at most 2% or
// 16 KiB (weight files' JSON headers), over by at most 5% or 64 KiB (the pack's index is bounded, not
// counted), on real builds of every stage that writes more than that: one-shot
// and sequential calibration, GPTQ and RTN (rtn-tile), activation samples and act-clip, promoted
// twins, the hybrid architectures' sites and an MoE model's expert Hessians. A stub counts the blocks it
// takes (its owned tensors are holes). Only the stages in small may declare nothing, and together they
// write at most 1 MiB.
func TestDeclaredWrites(t *testing.T) {
	stories := testfiles.Path(t, "stories260K.gguf")
	calibText := []string{"calibration.corpus=" + abs(t, "../recipes/demo-stories-calib.txt"), "calibration.sequences=4", "calibration.ctx=64",
		"screen.text=" + testfiles.Path(t, "tinystories_sample.txt"), "screen.ctx=64"}
	for _, tc := range []struct {
		name, recipe string
		sets         []string
	}{
		{"synthetic, one-shot", writeRecipe(t, "oneshot"), nil},
		{"synthetic, sequential", writeRecipe(t, "sequential"), nil},
		{"synthetic, one-shot, RTN (rtn-tile)", writeRecipe(t, "oneshot"), []string{"schemes.1.method=rtn"}},
		{"stories260K w4a4-best (act-clip)", "../recipes/w4a4-best.yaml", append([]string{"source.model=" + stories}, calibText...)},
		{"stories260K w4a8-best, promoted", "../recipes/w4a8-best.yaml", append([]string{"source.model=" + stories,
			"promote={to: I8_ROT, budget_mib: 0.05}"}, calibText...)},
		{"tiny-qwen35", "../recipes/w4a8-gptq-g32-rot.yaml", append([]string{"source.model=" + testfiles.Path(t, "tiny-qwen35.gguf"), "calibration.window=1"}, calibText...)},
		{"tiny-lfm2moe", "../recipes/w4a8-gptq-g32-rot.yaml", append([]string{"source.model=" + testfiles.Path(t, "tiny-lfm2moe.gguf"), "calibration.window=1"}, calibText...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := buildStatus(t, tc.recipe, tc.sets...)
			stages := map[string]bool{}
			var undeclared int64
			for _, n := range nodes {
				if !n.Cached {
					t.Fatalf("%s not cached after the build", n.ID)
				}
				var got int64
				for _, f := range n.Files {
					got += f.Size
					if n.Stage == "emit-stub" {
						got = testfiles.Allocated(t, f.Path)
					}
				}
				if n.Writes == 0 {
					if !small[n.Stage] {
						t.Errorf("%s (stage %s) declares no writes; it wrote %d bytes", n.ID, n.Stage, got)
					}
					undeclared += got
					continue
				}
				stages[n.Stage] = true
				under, over := max(got/50, 16<<10), max(got/20, 64<<10)
				if diff := n.Writes - got; diff < -under || diff > over {
					t.Errorf("%s: declared %d bytes, wrote %d (off by %d; allowed %d under, %d over)", n.ID, n.Writes, got, diff, under, over)
				}
			}
			if undeclared > 1<<20 {
				t.Errorf("the nodes that declare nothing wrote %d bytes, want at most 1 MiB", undeclared)
			}
			t.Logf("stages checked: %s; undeclared outputs: %d bytes", strings.Join(keys(stages), " "), undeclared)
		})
	}
}

// small are the stages whose outputs are a few KiB to a few MiB whatever the model: JSON records, a
// report page, checksums. Every other stage declares what it writes.
var small = map[string]bool{"screen": true, "report": true, "sha256": true, "provenance": true, "verify-local": true,
	"routing": true, "residency": true, "verify-board": true}

// buildStatus builds the recipe into a fresh store and returns the status of its plan afterwards.
func buildStatus(t *testing.T, path string, sets ...string) []engine.NodeStatus {
	t.Helper()
	r := newRig(t)
	name, plan, err := r.plan(t, path, sets...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.eng.Build(ctx, name, plan, engine.BuildOptions{OutDir: filepath.Join(t.TempDir(), "out")}); err != nil {
		t.Fatal(err)
	}
	nodes, err := r.eng.Status(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

func keys(m map[string]bool) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
