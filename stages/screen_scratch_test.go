package stages_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/fixtures"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/stages"
)

// TestScreenRefusesPaddedEntry screens a pack one entry of which (blk.0.attn_k.weight, K = 64) is
// rotated with a Hadamard block of 2^18, so that its padded K is 262144: valid in a pack, but emulating
// it on a chunk of 512 tokens takes 512·262144 rotated floats and activation codes (640 MiB; with a
// block of 2^24, 40 GiB), more than the node declares in all (stages.ScreenMemory: 361 MiB for
// stories260K at ctx 512). screen must refuse it before reading any entry, naming the entry, its KP,
// the model's K and the budget, as eval --pack does against --mem; it ran the chunk, past its declared
// memory.
func TestScreenRefusesPaddedEntry(t *testing.T) {
	modelPath := testfiles.Path(t, "stories260K.gguf")
	packPath := filepath.Join(t.TempDir(), "wide.orkpack")
	const name, kp, ctx = "blk.0.attn_k.weight", 1 << 18, 512
	fixtures.PaddedEntryPack(t, modelPath, packPath, name, kp)
	shape := shapeOfFile(t, modelPath)
	budget := stages.ScreenMemory(shape, ctx, 1, nil)
	sj, err := json.Marshal(shape)
	if err != nil {
		t.Fatal(err)
	}
	params := fmt.Sprintf(`{"shape":%s,"ctx":%d,"chunks":1,"text_name":"stories-generated.txt"}`, sj, ctx)
	_, err = runStage(t, "screen", params, map[string]string{"model": modelPath, "pack": packPath, "text": testfiles.Path(t, "stories-generated.txt")})
	t.Logf("declared %d bytes: %v", budget, err)
	for _, want := range []string{"pack entry " + name, "KP = 262144", "K = 64", fmt.Sprintf("memory budget of %d bytes", budget)} {
		if err == nil || !errors.Is(err, model.ErrOverBudget) || !strings.Contains(err.Error(), want) {
			t.Errorf("screen: %v, want model.ErrOverBudget containing %q", err, want)
		}
	}
}

// TestScreenRunsDeclaredPaddedEntry screens the pack of TestScreenRefusesPaddedEntry (an entry padded
// to KP = 262144) with its entries' geometry declared (ScreenParams.Emulated, as the planner declares
// every entry it plans): the node declares the entry's emulation scratch and the screen runs where the
// undeclared one is refused. ScreenMemory declared a fixed 96 MiB for the emulation whatever the KP.
func TestScreenRunsDeclaredPaddedEntry(t *testing.T) {
	modelPath := testfiles.Path(t, "stories260K.gguf")
	packPath := filepath.Join(t.TempDir(), "wide.orkpack")
	const name, kp, ctx = "blk.0.attn_k.weight", 1 << 18, 512
	fixtures.PaddedEntryPack(t, modelPath, packPath, name, kp)
	r, err := pack.Open(context.Background(), packPath)
	if err != nil {
		t.Fatal(err)
	}
	var es []stages.EmulatedEntry
	for _, e := range r.Entries() {
		ee := stages.EmulatedEntry{DType: e.DType.String(), N: e.N, KP: e.K, Group: e.Group}
		if e.Rotation.Kind != pack.RotNone {
			ee.Block = e.Rotation.Block
		}
		es = append(es, ee)
	}
	r.Close()
	shape := shapeOfFile(t, modelPath)
	p := stages.ScreenParams{Shape: shape, Ctx: ctx, Chunks: 1, TextName: "stories-generated.txt", Emulated: stages.EmulatedEntries(es)}
	declared, undeclared := stages.ScreenMemory(shape, ctx, 1, p.Emulated), stages.ScreenMemory(shape, ctx, 1, nil)
	params, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runStage(t, "screen", string(params), map[string]string{"model": modelPath, "pack": packPath, "text": testfiles.Path(t, "stories-generated.txt")})
	t.Logf("declared %d bytes (%d without the entries): %v", declared, undeclared, err)
	if err != nil {
		t.Fatalf("screen of a pack whose entries the node declares: %v", err)
	}
	if _, ok := out["screen.json"]; !ok {
		t.Errorf("screen wrote %v, want screen.json", out)
	}
}
