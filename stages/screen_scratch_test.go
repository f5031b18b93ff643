package stages_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/fixtures"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/model"
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
	budget := stages.ScreenMemory(shape, ctx)
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
