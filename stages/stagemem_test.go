//go:build linux

package stages_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
	"orkpipe/stages"
)

// stageMemChildEnv holds the JSON stageMemChild of a child run of measureStage.
const stageMemChildEnv = "ORKPIPE_STAGE_MEM_CHILD"

// stageMemChild is what a child run of measureStageUnder does: run one node of Stage with Params on
// Inputs (input name -> path) into OutDir under the Go memory limit Limit (0: none), and write a
// memResult to Result.
type stageMemChild struct {
	Stage  string            `json:"stage"`
	Params json.RawMessage   `json:"params"`
	Inputs map[string]string `json:"inputs"`
	OutDir string            `json:"out_dir"`
	Result string            `json:"result"`
	Limit  int64             `json:"limit"`
}

// memResult is what a child measured.
type memResult struct {
	HWMKB   int64   `json:"hwm_kb"`   // VmHWM after the run: the process's peak resident set
	BaseKB  int64   `json:"base_kb"`  // VmHWM before the run: the test binary's fixed cost
	RSSKB   int64   `json:"rss_kb"`   // VmRSS after the run
	GoBytes uint64  `json:"go_bytes"` // memory the Go runtime has mapped and not released, after the run
	LiveMax uint64  `json:"live_max"` // the Go heap's live bytes as of the last collection, sampled every 10 ms, at their highest
	GCs     uint64  `json:"gcs"`      // collections during the run
	Seconds float64 `json:"seconds"`
}

// childNonGo is room for the child's memory outside the Go runtime's accounting (the test binary's
// mapped text and data: about 7 MB resident).
const childNonGo = 16 << 20

// measureStage runs one node of stage in a fresh process (this test binary re-executed running only
// test, which must start with runStageMemChildIfAsked) under a Go memory limit of declared less
// childNonGo, as a build process running it alone would, and returns what the child measured and the
// node's output directory.
func measureStage(t *testing.T, test, stage string, params any, inputs map[string]string, declared int64) (memResult, string) {
	t.Helper()
	return measureStageUnder(t, test, stage, params, inputs, declared-childNonGo)
}

// measureStageUnder is measureStage with the child's Go memory limit given: limit bytes, or none for 0.
func measureStageUnder(t *testing.T, test, stage string, params any, inputs map[string]string, limit int64) (memResult, string) {
	t.Helper()
	p, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := stageMemChild{Stage: stage, Params: p, Inputs: inputs, OutDir: filepath.Join(dir, "out"), Result: filepath.Join(dir, "result.json"), Limit: limit}
	if err := os.Mkdir(c.OutDir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := "GOMEMLIMIT=off" // also over a GOMEMLIMIT the test runs under
	if limit != 0 {
		env = "GOMEMLIMIT=" + jsonInt(limit)
	}
	j, _ := json.Marshal(c)
	cmd := testfiles.SelfCommand("-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), stageMemChildEnv+"="+string(j), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan if this test binary dies (timeout)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	b, err := os.ReadFile(c.Result)
	if err != nil {
		t.Fatalf("child wrote no result: %v\n%s", err, out)
	}
	var r memResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("child result %s: %v", c.Result, err)
	}
	return r, c.OutDir
}

// runStageMemChildIfAsked is the child side of measureStageUnder: in a child it runs the node, records
// VmHWM and the Go heap's live bytes and collections, and reports true (the test returns); in the
// parent it reports false.
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
	want := c.Limit
	if want == 0 {
		want = math.MaxInt64
	}
	if got := debug.SetMemoryLimit(-1); got != want {
		t.Fatalf("child Go memory limit %d, want %d", got, want)
	}
	in := map[string]stages.File{}
	for name, p := range c.Inputs {
		in[name] = stages.File{Path: p}
	}
	var r memResult
	r.BaseKB = statusKB(t, "VmHWM")
	gc := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(gc)
	gc0 := gc[0].Value.Uint64()
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			metrics.Read(live)
			r.LiveMax = max(r.LiveMax, live[0].Value.Uint64())
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	err = b.Run(context.Background(), stages.Request{Inputs: in, OutDir: c.OutDir})
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	r.Seconds = time.Since(start).Seconds()
	metrics.Read(gc)
	r.GCs = gc[0].Value.Uint64() - gc0
	r.HWMKB, r.RSSKB = statusKB(t, "VmHWM"), statusKB(t, "VmRSS")
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	r.GoBytes = s[0].Value.Uint64() - s[1].Value.Uint64()
	out, _ := json.Marshal(r)
	if err := os.WriteFile(c.Result, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return true
}

// statusKB returns a "kB" field of /proc/self/status.
func statusKB(t *testing.T, key string) int64 {
	t.Helper()
	v, err := testfiles.StatusKB(key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func gib(b int64) float64 { return float64(b) / (1 << 30) }

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// requireMemoryMeasure skips a memory test where its measure means nothing: without
// /proc/self/status (VmHWM), or in a -race build, whose shadow memory inflates VmHWM.
func requireMemoryMeasure(t *testing.T) {
	t.Helper()
	if raceEnabled {
		testfiles.SkipBuild(t, "a -race build: the race detector's shadow memory inflates VmHWM; memory bounds are checked without -race")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		testfiles.Need(t, "needs /proc/self/status for VmHWM: %v", err)
	}
}
