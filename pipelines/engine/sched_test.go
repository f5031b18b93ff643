package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
)

const mib = 1 << 20

// TestMemoryBudgetNeverExceeded runs 24 independent nodes with declared estimates of 100..700 MiB
// on 8 workers under a 1000 MiB budget. The stages themselves sum the estimates of the runs in
// progress; the peak must stay within the budget (and the budget must actually bind).
func TestMemoryBudgetNeverExceeded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int64
		jobs   int
	}{
		{"budget binds before jobs", 1000 * mib, 8},
		{"jobs bind before budget", 100000 * mib, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetCounts()
			s := openStore(t, t.TempDir())
			e := newEngine(t, s, engine.WithJobs(tc.jobs), engine.WithMemoryBudget(tc.budget))
			g := engine.NewGraph()
			var sum int64
			for i := range 24 {
				mem := int64(100+(i*300)%700) * mib
				sum += mem
				node(g, fmt.Sprintf("n%02d", i), testParams{Mem: mem, SleepMS: 15}, nil)
			}
			res := mustBuild(t, e, "mem", g, engine.BuildOptions{})
			peak := memPeak.Load()
			t.Logf("budget %d MiB, jobs %d: peak of running estimates %d MiB (engine: %d MiB), executed %d", tc.budget/mib, tc.jobs, peak/mib, res.PeakMemory/mib, res.Executed)
			if res.Executed != 24 {
				t.Fatalf("executed %d, want 24", res.Executed)
			}
			if peak > tc.budget || res.PeakMemory > tc.budget {
				t.Errorf("running estimates peaked at %d (engine %d) bytes, above the budget %d", peak, res.PeakMemory, tc.budget)
			}
			if peak <= 700*mib {
				t.Errorf("peak %d MiB: nodes never overlapped, the test proves nothing", peak/mib)
			}
		})
	}
}

func TestOversizedNodeFailsAtPlanTime(t *testing.T) {
	s := openStore(t, t.TempDir())
	e := newEngine(t, s, engine.WithMemoryBudget(512*mib))
	g := engine.NewGraph()
	a := node(g, "small", testParams{Mem: 100 * mib}, nil)
	node(g, "calibrate[w3]", testParams{Mem: 600 * mib}, map[string]engine.Input{"in": a.Output("out")})
	// Nodes reading what the oversized node makes are counted in one line, not named each: at a 27B
	// model's scale their lines buried the cause.
	prev := engine.Input{}
	for i := range 40 {
		in := map[string]engine.Input{"in": g.Node("calibrate[w3]").Output("out")}
		if i > 0 {
			in = map[string]engine.Input{"in": prev}
		}
		prev = node(g, fmt.Sprintf("after%02d", i), testParams{Mem: mib}, in).Output("out")
	}
	_, err := e.Plan(g)
	if !errors.Is(err, engine.ErrOverBudget) || !strings.Contains(err.Error(), `"calibrate[w3]"`) {
		t.Fatalf("plan: %v; want ErrOverBudget naming calibrate[w3]", err)
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != 2 || lines[1] != "40 more nodes not planned: they read what the nodes above make" {
		t.Errorf("plan error in %d lines, want the oversized node's and the count of the 40 after it:\n%v", len(lines), err)
	}
	t.Log(err)
}

// TestCancelLeavesNoPartialOutputs cancels a build while a node has written part of its output:
// the build stops, no action record exists for that node, the partial bytes never enter the
// store, nothing is materialized, and the next build runs the node to completion.
func TestCancelLeavesNoPartialOutputs(t *testing.T) {
	resetCounts()
	s := openStore(t, t.TempDir())
	e := newEngine(t, s)
	marker := filepath.Join(t.TempDir(), "started")
	t.Setenv("ORKPIPE_TEST_BLOCK", "1")
	t.Setenv("ORKPIPE_TEST_MARKER", marker)
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		res *engine.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := build(t, ctx, e, "blocking", blockingGraph(), engine.BuildOptions{OutDir: out})
		done <- result{res, err}
	}()
	var partial []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if dir, err := os.ReadFile(marker); err == nil {
			if partial, err = os.ReadFile(filepath.Join(string(dir), "out")); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the blocking node never started")
		}
	}
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled build: err %v, want context.Canceled", r.err)
	}
	if slow := nodeResult(t, r.res, "slow"); slow.Outcome != engine.OutcomeSkipped {
		t.Errorf("slow: outcome %v, want skipped (canceled)", slow.Outcome)
	} else if _, err := s.GetAction(context.Background(), slow.Key); !errors.Is(err, artifacts.ErrNotFound) {
		t.Errorf("action record of the canceled node: %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(context.Background(), artifacts.SumBytes(partial)); !errors.Is(err, artifacts.ErrNotFound) {
		t.Errorf("the partial output (%d bytes) is in the store: %v", len(partial), err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("output directory holds %d entries after a canceled build", len(ents))
	}
	t.Setenv("ORKPIPE_TEST_BLOCK", "0")
	resetCounts()
	res := mustBuild(t, e, "blocking", blockingGraph(), engine.BuildOptions{OutDir: out})
	if got := executedTags(); got != "last,slow" || res.Cached != 1 {
		t.Errorf("build after cancel: executed %q cached %d, want last,slow and 1", got, res.Cached)
	}
}

// TestFailure: a failing node skips its dependents; the error names the node and its key;
// --keep-going runs the independent branch, without it the build stops.
func TestFailure(t *testing.T) {
	graph := func() *engine.Graph {
		g := engine.NewGraph()
		bad := node(g, "bad", testParams{Fail: true}, nil)
		node(g, "after-bad", testParams{}, map[string]engine.Input{"in": bad.Output("out")})
		ok := node(g, "ok", testParams{SleepMS: 50}, nil)
		node(g, "after-ok", testParams{}, map[string]engine.Input{"in": ok.Output("out")})
		return g
	}
	t.Run("keep-going", func(t *testing.T) {
		resetCounts()
		s := openStore(t, t.TempDir())
		e := newEngine(t, s, engine.WithJobs(1), engine.WithKeepGoing(true))
		res, err := build(t, context.Background(), e, "fail", graph(), engine.BuildOptions{})
		if !errors.Is(err, engine.ErrNodeFailed) {
			t.Fatalf("err %v, want ErrNodeFailed", err)
		}
		bad := nodeResult(t, res, "bad")
		if !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), bad.Key.String()) {
			t.Errorf("error %q does not name the node and its key %s", err, bad.Key)
		}
		if res.Executed != 2 || res.Failed != 1 || res.Skipped != 1 || counts()["after-ok"] != 1 {
			t.Errorf("keep-going: executed %d failed %d skipped %d (ran %s); want 2, 1, 1", res.Executed, res.Failed, res.Skipped, executedTags())
		}
		if nodeResult(t, res, "after-bad").Outcome != engine.OutcomeSkipped {
			t.Errorf("after-bad ran although its dependency failed")
		}
	})
	t.Run("stop", func(t *testing.T) {
		resetCounts()
		s := openStore(t, t.TempDir())
		e := newEngine(t, s, engine.WithJobs(1))
		g := engine.NewGraph()
		bad := node(g, "bad", testParams{Fail: true}, nil)
		var prev *engine.Node
		for i := range 5 { // a chain that cannot all finish before the failure stops the build
			in := map[string]engine.Input{}
			if prev != nil {
				in["in"] = prev.Output("out")
			}
			prev = node(g, fmt.Sprintf("chain%d", i), testParams{SleepMS: 40}, in)
		}
		node(g, "after-bad", testParams{}, map[string]engine.Input{"in": bad.Output("out")})
		res, err := build(t, context.Background(), e, "fail", g, engine.BuildOptions{})
		if !errors.Is(err, engine.ErrNodeFailed) {
			t.Fatalf("err %v, want ErrNodeFailed", err)
		}
		if res.Failed != 1 || res.Skipped < 2 || res.Executed+res.Failed+res.Skipped != 7 {
			t.Errorf("stop: executed %d failed %d skipped %d; want the chain cut short", res.Executed, res.Failed, res.Skipped)
		}
	})
}

// TestMissingSourceIsAnError: a source file that does not exist fails its node with the node,
// the input and the path in the message; nothing is substituted for it.
func TestMissingSourceIsAnError(t *testing.T) {
	resetCounts()
	s := openStore(t, t.TempDir())
	e := newEngine(t, s)
	missing := filepath.Join(t.TempDir(), "no-such-pack.orkpack")
	g := engine.NewGraph()
	r := node(g, "score", testParams{}, map[string]engine.Input{"pack": engine.File(missing)})
	g.Export("score", r.Output("out"))
	res, err := build(t, context.Background(), e, "missing", g, engine.BuildOptions{})
	if !errors.Is(err, engine.ErrNodeFailed) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), `"pack"`) || !strings.Contains(err.Error(), `"score"`) {
		t.Errorf("err %v: want the node, the input and the path named", err)
	}
	if res.Failed != 1 || counts()["score"] != 0 {
		t.Errorf("failed %d, ran %d times; want 1 and 0", res.Failed, counts()["score"])
	}
	if _, err := e.Status(context.Background(), mustPlan(t, e, g)); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Status with a missing source: %v", err)
	}
}

func mustPlan(t *testing.T, e *engine.Engine, g *engine.Graph) *engine.Plan {
	t.Helper()
	p, err := e.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
