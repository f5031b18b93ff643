package stages_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/ork/quant"
	"orkpipe/stages"
)

// TestPropagateRefusesUndeclaredScratch: a propagate window of stories260K whose blk.0.attn_k.weight
// (K = 64) is bound to a weight file padded to one Hadamard block of 2^18 while the node declares it
// at KP 64 (as the planner would for the default block): emulating it on a chunk of 4 sequences of 128
// tokens takes 512·262144 rotated values and codes (~640 MiB), past all the node declares. propagate
// must refuse it before any layer runs, naming the weight, its file, the tokens and the needed and
// declared bytes, as the screen refuses such a pack entry; it ran, and failed only at the layer's load
// on the geometry, saying nothing of memory.
func TestPropagateRefusesUndeclaredScratch(t *testing.T) {
	modelPath := testfiles.Path(t, "stories260K.gguf")
	const name, k, kp, seqs, ctxLen = "blk.0.attn_k.weight", 64, 1 << 18, 4, 128
	f, err := gguf.Open(context.Background(), modelPath)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := f.Tensor(name)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	n := int(ti.Shape[1])
	q := &stages.QWeight{Meta: stages.QWeightMeta{Name: name, DType: "I8_ROT", Method: "rtn", N: n, K: k, KP: kp, Bits: 8, Group: 32,
		Rotation: quant.Rotation{K: k, Padded: kp, Block: kp, Signs: true, Seed: 9}, ActBits: 8, Source: artifacts.SumBytes([]byte(name)).String()},
		Codes: make([]int8, n*kp), Scales: make([]float32, n*kp/32)}
	for i := range q.Scales {
		q.Scales[i] = 1
	}
	wpath := filepath.Join(t.TempDir(), "wide.qweight")
	if err := stages.WriteQWeight(wpath, q); err != nil {
		t.Fatal(err)
	}
	tokens := mustExec(t, "tokenize", fmt.Sprintf(`{"sequences":%d,"ctx":%d,"corpus_name":"stories-calib.txt"}`, seqs, ctxLen),
		map[string]string{"model": modelPath, "corpus": testfiles.Path(t, "stories-calib.txt")})["tokens"]
	shape := shapeOfFile(t, modelPath)
	ws := []stages.WindowWeight{{Name: name, DType: "I8_ROT", KP: k, Group: 32, Block: k}}
	declared := stages.PropagateMemory(shape, 0, 1, seqs, ctxLen, ws)
	cfg := shape.Config()
	rows := calib.ChunkRows(&cfg, seqs, ctxLen)
	sj, err := json.Marshal(shape)
	if err != nil {
		t.Fatal(err)
	}
	params := fmt.Sprintf(`{"shape":%s,"start":0,"end":1,"sequences":%d,"ctx":%d,"weights":[{"name":%q,"dtype":"I8_ROT","kp":%d,"group":32,"block":%d}]}`,
		sj, seqs, ctxLen, name, k, k)
	_, err = runStage(t, "propagate", params, map[string]string{"model": modelPath, "tokens": tokens, "w." + name: wpath})
	t.Logf("declared %d bytes: %v", declared, err)
	for _, want := range []string{"weight " + name, wpath, fmt.Sprintf("on %d tokens", rows), "KP = 262144", fmt.Sprintf("declared peak memory (PropagateMemory) of %d bytes", declared)} {
		if err == nil || !errors.Is(err, model.ErrOverBudget) || !strings.Contains(err.Error(), want) {
			t.Errorf("propagate: %v, want model.ErrOverBudget containing %q", err, want)
		}
	}
}
