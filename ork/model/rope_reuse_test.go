package model

import (
	"context"
	"testing"

	"orkpipe/internal/testfiles"
)

// TestRoPETableReused: the RoPE table of a sequence length is tabulated once and reused by every layer
// call (running stories260K's layers again keeps the same table), and a new length re-tabulates it.
func TestRoPETableReused(t *testing.T) {
	ctx := context.Background()
	m, _, f, err := OpenGGUF(ctx, testfiles.Path(t, "stories260K.gguf"), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layers := make([]*Layer, m.Cfg.NLayer)
	for i := range layers {
		if layers[i], err = LoadLayer(ctx, &m.Cfg, m.Src, i); err != nil {
			t.Fatal(err)
		}
	}
	h, err := m.Embed(ctx, []int32{1, 400, 32, 7, 91, 300, 12, 5})
	if err != nil {
		t.Fatal(err)
	}
	run := func(h []float32) {
		for _, l := range layers {
			if err := m.RunLayer(ctx, l, h, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(h)
	first := m.rope
	run(h)
	if m.rope != first || first.t != 8 {
		t.Fatalf("RoPE table after a second pass: %p (t %d), want the first one %p (t 8)", m.rope, m.rope.t, first)
	}
	run(h[:4*m.Cfg.NEmbd])
	if m.rope == first || m.rope.t != 4 {
		t.Errorf("a 4-token pass kept the 8-position table")
	}
}
