package stages_test

import (
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/stages"
)

// TestPropagateMemoryCountsEmulation: a propagate window of stories260K whose blk.0.ffn_gate (172 rows of
// K = 64) is finalized at the largest rotation_block a recipe takes (65536: KP 65536) declares, beyond
// what the window declares with that weight left to the source, at least the scratch one Apply of its
// emulation takes on a chunk of the window's sequences (model.EmulationBytes on calib.ChunkRows tokens:
// the rotated rows and activation codes, ~160 MiB for 512 tokens). PropagateMemory declared a flat
// 48 MiB for it, whatever the KP and the tokens.
func TestPropagateMemoryCountsEmulation(t *testing.T) {
	modelPath := testfiles.Path(t, "stories260K.gguf")
	shape := shapeOfFile(t, modelPath)
	c := shape.Config()
	const name, n, kp, seqs, ctx = "blk.0.ffn_gate.weight", 172, 65536, 8, 128
	w := stages.WindowWeight{Name: name, DType: "I4_NATIVE", KP: kp, Group: 32, Block: kp}
	declared := stages.PropagateMemory(shape, 0, 1, seqs, ctx, []stages.WindowWeight{w})
	source := stages.PropagateMemory(shape, 0, 1, seqs, ctx, nil)
	rows := calib.ChunkRows(&c, seqs, ctx)
	dt, err := pack.ParseDType(w.DType)
	if err != nil {
		t.Fatal(err)
	}
	need, ok := model.EmulationBytes(pack.Meta{Name: name, DType: dt, N: n, K: kp, Group: w.Group,
		Rotation: pack.Rotation{Kind: pack.RotHadamard, Block: kp}}, rows, 0)
	if !ok {
		t.Fatal("EmulationBytes overflows")
	}
	t.Logf("declared %d bytes, %d with the weight left to the source; its emulation on %d tokens takes %d", declared, source, rows, need)
	if rows < ctx {
		t.Errorf("ChunkRows(%d sequences of %d) = %d, want at least one sequence", seqs, ctx, rows)
	}
	if declared-source < need {
		t.Errorf("propagate declares %d bytes more for the finalized weight of KP %d than for the source's, less than the %d bytes one Apply of its emulation takes on %d tokens", declared-source, kp, need, rows)
	}
}
