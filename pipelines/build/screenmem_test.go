package build_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
)

// TestScreenDeclaresEmulation plans the demo recipe with its rotated scheme at rotation_block 16384
// (every rotated weight of stories260K padded to KP = 16384; round-to-nearest, as GPTQ's Hessian of that
// width passes the rig's 2 GiB) and a screen of ctx 2048: the screen node declares at least the scratch
// the screen's own check needs of such an entry (model.EmulationBytes on a chunk of 2048 tokens, about
// 160 MiB for the widest), so the screen runs where it was refused. ScreenMemory declared a fixed 96 MiB
// for the emulation, whatever the KP.
func TestScreenDeclaresEmulation(t *testing.T) {
	r := newRig(t)
	const kp, ctx = 16384, 2048
	st, err := planStatus(t, r, "../recipes/demo.yaml", "schemes.1.rotation_block=16384", "schemes.1.method=rtn", "screen.ctx=2048")
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := st["screen"]
	if !ok {
		t.Fatal("no screen node")
	}
	st, err = planStatus(t, r, "../recipes/demo.yaml", "schemes.1.method=rtn", "screen.ctx=2048") // rotation_block 32: KP = K
	if err != nil {
		t.Fatal(err)
	}
	base := st["screen"].Mem
	f, err := gguf.Open(context.Background(), "../recipes/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dt, err := pack.ParseDType("I4_NATIVE")
	if err != nil {
		t.Fatal(err)
	}
	// need: the widest entry's scratch at KP = 16384 (every block weight as wide as the rotated scheme
	// pads it; its ffn_gate and ffn_up the widest); small: at least any entry's at the default block.
	var need, small int64
	for _, ti := range f.Tensors {
		if len(ti.Shape) != 2 || ti.Name == "token_embd.weight" || ti.Name == "output.weight" {
			continue
		}
		m := pack.Meta{Name: ti.Name, DType: dt, K: kp, N: int(ti.Rows()), Group: 32, Rotation: pack.Rotation{Kind: pack.RotHadamard, Block: kp}}
		n, ok := model.EmulationBytes(m, ctx, 0)
		if !ok {
			t.Fatalf("%s: EmulationBytes overflows", ti.Name)
		}
		need = max(need, n)
		m.K, m.Rotation.Block = 2*int(ti.RowLen()), 32 // more than any weight's KP at the default block (K padded to 32)
		n, _ = model.EmulationBytes(m, ctx, 0)
		small = max(small, n)
	}
	t.Logf("screen declares %d bytes, %d with the default rotation block; an entry of KP %d needs %d on %d tokens", sc.Mem, base, kp, need, ctx)
	if sc.Mem-base < need-small {
		t.Errorf("screen declares %d bytes for entries of KP %d, %d for KP = K: %d more, less than the %d more bytes of scratch one Apply of the widest takes at ctx %d", sc.Mem, kp, base, sc.Mem-base, need-small, ctx)
	}
}

// TestScreenDeclaresTextChunks plans the demo recipe with its screen on every chunk (chunks 0): the
// planner bounds the chunks by the text's size (text_chunks, (size+2)/ctx), so the screen node declares
// what it declares with chunks set to that bound, not the memory of as many chunks as a group holds
// (4096 at stories260K's width and ctx 128), and less with one chunk.
func TestScreenDeclaresTextChunks(t *testing.T) {
	r := newRig(t)
	st, err := os.Stat("../recipes/demo-stories-eval.txt")
	if err != nil {
		t.Fatal(err)
	}
	const ctx = 128
	bound := (st.Size() + 2) / ctx
	mem := func(sets ...string) int64 {
		t.Helper()
		s, err := planStatus(t, r, "../recipes/demo.yaml", append([]string{"screen.ctx=128"}, sets...)...)
		if err != nil {
			t.Fatal(err)
		}
		sc, ok := s["screen"]
		if !ok {
			t.Fatal("no screen node")
		}
		return sc.Mem
	}
	all, bounded, one := mem("screen.chunks=0"), mem(fmt.Sprintf("screen.chunks=%d", bound)), mem("screen.chunks=1")
	t.Logf("screen of a %d-byte text at ctx %d declares %d bytes; with chunks %d %d; with one chunk %d", st.Size(), ctx, all, bound, bounded, one)
	if all != bounded || one >= all {
		t.Errorf("screen declares %d bytes on every chunk, %d with chunks %d (the text's bound), %d with one: want the first two equal and more than the last", all, bounded, bound, one)
	}
}
