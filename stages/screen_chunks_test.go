package stages_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/fixtures"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/stages"
)

// TestScreenDeclaresChunks: a screen of tiny-lfm2moe at ctx 32 whose pack holds every routed expert's
// slice (I8_ROT, group 32) declares the scratch of an expert's Apply on the tokens of the chunks it
// evaluates (4: 128 tokens), not on those of min(moeSeqs, EvalGroupChunks) chunks (3527 at ctx 32:
// 112,864 tokens, whatever the screen ran), and the node's Spec declares that for chunks 4 or
// text_chunks 4 (the planner's bound from the text's size) alike.
func TestScreenDeclaresChunks(t *testing.T) {
	shape := shapeOfFile(t, testfiles.Path(t, "tiny-lfm2moe.gguf"))
	cfg := shape.Config()
	var es []stages.EmulatedEntry
	for l := range cfg.NLayer {
		for _, s := range cfg.Sites(l) {
			if calib.Captured(s) && s.Experts > 0 {
				for _, w := range s.Weights {
					es = append(es, stages.EmulatedEntry{DType: "I8_ROT", N: w.N, KP: s.Width, Group: 32, Block: 32, Expert: true})
				}
			}
		}
	}
	if len(es) == 0 {
		t.Fatal("tiny-lfm2moe.gguf: no routed experts")
	}
	es = stages.EmulatedEntries(es)
	const ctx, chunks = 32, 4
	tokens := cfg.EvalExpertTokens(ctx, 2, chunks)
	all := cfg.EvalExpertTokens(ctx, 2, 0)
	if tokens > chunks*ctx || tokens < ctx {
		t.Errorf("EvalExpertTokens(%d, 2, %d) = %d, want between a chunk and the %d tokens of %d chunks", ctx, chunks, tokens, chunks*ctx, chunks)
	}
	bounded, unbounded := stages.ScreenMemory(shape, ctx, chunks, es), stages.ScreenMemory(shape, ctx, 0, es)
	emu, emuAll := stages.EmulationScratch(es, ctx, tokens), stages.EmulationScratch(es, ctx, all)
	t.Logf("expert Apply on %d tokens (%d for any number of chunks): emulation scratch %d (%d); ScreenMemory %d (%d)", tokens, all, emu, emuAll, bounded, unbounded)
	if unbounded-bounded < emuAll-emu {
		t.Errorf("ScreenMemory for %d chunks is %d bytes less than for any number, want at least the %d bytes less the expert's scratch takes on %d tokens than on %d", chunks, unbounded-bounded, emuAll-emu, tokens, all)
	}
	if got := stages.ScreenMemory(shape, ctx, chunks, nil); bounded-got != emu {
		t.Errorf("ScreenMemory for %d chunks counts %d bytes for the entries, want EmulationScratch on %d expert tokens, %d", chunks, bounded-got, tokens, emu)
	}
	for _, p := range []stages.ScreenParams{{Chunks: chunks}, {TextChunks: chunks}, {Chunks: chunks + 1, TextChunks: chunks}, {Chunks: chunks, TextChunks: 100}} {
		p.Shape, p.Ctx, p.Emulated, p.TextName = shape, ctx, es, "text"
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		k, err := stages.Lookup("screen")
		if err != nil {
			t.Fatal(err)
		}
		bound, err := k.Bind(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := bound.Spec().PeakMemory; got != bounded {
			t.Errorf("screen chunks %d, text_chunks %d: PeakMemory %d, want ScreenMemory for %d chunks, %d", p.Chunks, p.TextChunks, got, chunks, bounded)
		}
	}
}

// TestScreenRefusesUndeclaredChunks: a screen whose text fills more chunks than its text_chunks (the
// bound its memory is declared for) is refused naming the text, its chunks and text_chunks, before it
// evaluates any.
func TestScreenRefusesUndeclaredChunks(t *testing.T) {
	modelPath := testfiles.Path(t, "stories260K.gguf")
	packPath := filepath.Join(t.TempDir(), "p.orkpack")
	fixtures.PaddedEntryPack(t, modelPath, packPath, "blk.0.attn_k.weight", 64)
	sj, err := json.Marshal(shapeOfFile(t, modelPath))
	if err != nil {
		t.Fatal(err)
	}
	params := fmt.Sprintf(`{"shape":%s,"ctx":64,"chunks":0,"text_chunks":2,"text_name":"stories-generated.txt"}`, sj)
	_, err = runStage(t, "screen", params, map[string]string{"model": modelPath, "pack": packPath, "text": testfiles.Path(t, "stories-generated.txt")})
	t.Logf("screen: %v", err)
	for _, want := range []string{"stories-generated.txt", "chunks of 64", "text_chunks 2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("screen of a text of more chunks than text_chunks 2: %v, want an error containing %q", err, want)
		}
	}
}
