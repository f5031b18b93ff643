//go:build linux

package stages_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
	"orkpipe/stages"
)

// routeMemChildEnv holds the JSON routeMemChild of a child run of TestRouteMemory.
const routeMemChildEnv = "ORKPIPE_ROUTE_MEM_CHILD"

type routeMemChild struct {
	Params stages.RouteParams `json:"params"`
	Model  string             `json:"model"`
	Text   string             `json:"text"`
	OutDir string             `json:"out_dir"`
	Result string             `json:"result"`
	Limit  int64              `json:"limit"`
}

// TestRouteMemory measures a route node's peak RSS in a fresh process (as TestCalibrateMemory does for
// calibrate) against what it declares (stages.RouteMemory: every chunk's hidden states, one block's
// weights as held, one batch's activations): a Q8_0 MoE model of 2 blocks of 8 experts (n_embd 512, n_ff
// 704) routing tinystories_sample.txt in chunks of 128 tokens, max_chunks sized from the text as the
// planner sizes it.
func TestRouteMemory(t *testing.T) {
	if env := os.Getenv(routeMemChildEnv); env != "" {
		runRouteMemChild(t, env)
		return
	}
	if testing.Short() {
		t.Skip("synthesizes a model and routes a text in a child process")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("needs /proc/self/status for VmHWM: %v", err)
	}
	sp := stages.SynthParams{Layers: 2, Embd: 512, FF: 704, Heads: 8, HeadsKV: 2, Vocab: 512, Ctx: 256, Type: "Q8_0", Seed: 3, Experts: 8, ExpertsUsed: 2}
	synth, _ := json.Marshal(sp)
	modelPath := mustExec(t, "synth", string(synth), nil)["model.gguf"]
	text := testfiles.Path(t, "tinystories_sample.txt")
	st, err := os.Stat(text)
	if err != nil {
		t.Fatal(err)
	}
	p := stages.RouteParams{Shape: shapeOfFile(t, modelPath), Ctx: 128, MaxChunks: int((st.Size() + 2) / 128), TextName: "tinystories_sample.txt"}
	declared := stages.RouteMemory(p.Shape, p.MaxChunks, p.Ctx)
	dir := t.TempDir()
	c := routeMemChild{Params: p, Model: modelPath, Text: text, OutDir: filepath.Join(dir, "out"), Result: filepath.Join(dir, "result.json"), Limit: declared - childNonGo}
	if err := os.Mkdir(c.OutDir, 0o755); err != nil {
		t.Fatal(err)
	}
	res := runMeasuredChild[memResult](t, "TestRouteMemory", routeMemChildEnv, c, c.Result, "GOMEMLIMIT="+jsonInt(c.Limit))
	measured := res.HWMKB << 10
	t.Logf("route, %d chunks at most of %d tokens: %.1fs; peak RSS (VmHWM) %.3f GiB (binary alone %d KB); declared %.3f GiB; measured/declared %.3f",
		p.MaxChunks, p.Ctx, res.Seconds, gib(measured), res.BaseKB, gib(declared), float64(measured)/float64(declared))
	if measured > declared {
		t.Errorf("measured peak %d bytes > declared RouteMemory %d bytes", measured, declared)
	}
	if _, err := os.Stat(filepath.Join(c.OutDir, "routing.json")); err != nil {
		t.Error(err)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func runRouteMemChild(t *testing.T, env string) {
	var c routeMemChild
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatalf("%s: %v", routeMemChildEnv, err)
	}
	k, err := stages.Lookup("route")
	if err != nil {
		t.Fatal(err)
	}
	params, _ := json.Marshal(c.Params)
	b, err := k.Bind(params)
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != c.Limit {
		t.Fatalf("child Go memory limit %d, want %d", got, c.Limit)
	}
	var r memResult
	r.BaseKB = statusKB(t, "VmHWM")
	start := time.Now()
	if err := b.Run(context.Background(), stages.Request{Inputs: map[string]stages.File{"model": {Path: c.Model}, "text": {Path: c.Text}}, OutDir: c.OutDir}); err != nil {
		t.Fatal(err)
	}
	r.Seconds = time.Since(start).Seconds()
	r.HWMKB, r.RSSKB = statusKB(t, "VmHWM"), statusKB(t, "VmRSS")
	out, _ := json.Marshal(r)
	if err := os.WriteFile(c.Result, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
