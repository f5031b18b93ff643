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

	"orkpipe/stages"
)

// stageMemChildEnv holds the JSON stageMemChild of a child run of measureStage.
const stageMemChildEnv = "ORKPIPE_STAGE_MEM_CHILD"

// stageMemChild is what a child run of measureStage does: run one node of Stage with Params on Inputs
// (input name -> path) into OutDir under the Go memory limit Limit, and write a memResult to Result.
type stageMemChild struct {
	Stage  string            `json:"stage"`
	Params json.RawMessage   `json:"params"`
	Inputs map[string]string `json:"inputs"`
	OutDir string            `json:"out_dir"`
	Result string            `json:"result"`
	Limit  int64             `json:"limit"`
}

// measureStage runs one node of stage in a fresh process (this test binary re-executed running only
// test, which must start with runStageMemChildIfAsked) under a Go memory limit of declared less
// childNonGo, as a build process running it alone would, and returns what the child measured and the
// node's output directory.
func measureStage(t *testing.T, test, stage string, params any, inputs map[string]string, declared int64) (memResult, string) {
	t.Helper()
	p, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := stageMemChild{Stage: stage, Params: p, Inputs: inputs, OutDir: filepath.Join(dir, "out"), Result: filepath.Join(dir, "result.json"), Limit: declared - childNonGo}
	if err := os.Mkdir(c.OutDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return runMeasuredChild[memResult](t, test, stageMemChildEnv, c, c.Result, "GOMEMLIMIT="+jsonInt(c.Limit)), c.OutDir
}

// runStageMemChildIfAsked is the child side of measureStage: in a child it runs the node, records
// VmHWM and reports true (the test returns); in the parent it reports false.
func runStageMemChildIfAsked(t *testing.T) bool {
	env := os.Getenv(stageMemChildEnv)
	if env == "" {
		return false
	}
	var c stageMemChild
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatalf("%s: %v", stageMemChildEnv, err)
	}
	k, err := stages.Lookup(c.Stage)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.Bind(c.Params)
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != c.Limit {
		t.Fatalf("child Go memory limit %d, want %d", got, c.Limit)
	}
	in := map[string]stages.File{}
	for name, p := range c.Inputs {
		in[name] = stages.File{Path: p}
	}
	var r memResult
	r.BaseKB = statusKB(t, "VmHWM")
	start := time.Now()
	if err := b.Run(context.Background(), stages.Request{Inputs: in, OutDir: c.OutDir}); err != nil {
		t.Fatal(err)
	}
	r.Seconds = time.Since(start).Seconds()
	r.HWMKB, r.RSSKB = statusKB(t, "VmHWM"), statusKB(t, "VmRSS")
	out, _ := json.Marshal(r)
	if err := os.WriteFile(c.Result, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return true
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// requireMemoryMeasure skips a memory test where its measure means nothing: without
// /proc/self/status (VmHWM), or in a -race build, whose shadow memory inflates VmHWM.
func requireMemoryMeasure(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("a -race build: the race detector's shadow memory inflates VmHWM; memory bounds are checked without -race")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("needs /proc/self/status for VmHWM: %v", err)
	}
}
