package progress_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/demo"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/progress"
	"orkpipe/stages/reporthtml"
)

// TestTimelineOfABuild records the events of real builds of the engine's demo graph: the first
// run's timeline has every executed node, within the run, with its stage and the memory its plan
// event declared; the second run (all cached) has none; both pages are written and self-contained.
func TestTimelineOfABuild(t *testing.T) {
	ctx := context.Background()
	s, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := t.TempDir()
	for run, wantExecuted := range []int{5, 0} {
		rec := progress.NewTimelineRecorder()
		plans := &engine.Recorder{}
		sink := engine.SinkFunc(func(e engine.Event) { rec.Emit(e); plans.Emit(e) })
		e, err := engine.New(s, engine.WithJobs(2), engine.WithMemoryBudget(1<<30), engine.WithSink(sink))
		if err != nil {
			t.Fatal(err)
		}
		target := demo.Target{Seed: 9, Size: 100_000}
		g, err := target.Graph(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.Plan(g)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Build(ctx, target.Name(), p, engine.BuildOptions{OutDir: out})
		if err != nil {
			t.Fatal(err)
		}
		tl := rec.Timeline(target.Name(), 2, 1<<30)
		mem := map[string]int64{}
		for _, ev := range plans.Events() {
			if ev.Event == engine.EventPlan {
				mem[ev.Node] = ev.Mem
			}
		}
		if tl.Executed != wantExecuted || len(tl.Nodes) != wantExecuted || tl.Cached != res.Cached || tl.Target != target.Name() || tl.Budget != 1<<30 {
			t.Fatalf("run %d: timeline %+v, want %d executed nodes and %d cached", run, tl, wantExecuted, res.Cached)
		}
		for _, n := range tl.Nodes {
			if n.Start < 0 || n.End < n.Start || n.End > tl.Duration || n.Mem != mem[n.ID] || n.Mem <= 0 || n.Stage == "" || n.Failed {
				t.Errorf("run %d: node %+v (run of %v, declared %d)", run, n, tl.Duration, mem[n.ID])
			}
		}
		path, err := progress.WriteTimeline(out, tl)
		if err != nil {
			t.Fatal(err)
		}
		page, err := os.ReadFile(path)
		if err != nil || path != filepath.Join(out, reporthtml.TimelineFile) || reporthtml.Check(page) != nil {
			t.Fatalf("run %d: timeline page %s: %v", run, path, err)
		}
		if want := []byte("every output came from the cache"); (wantExecuted == 0) != bytes.Contains(page, want) {
			t.Errorf("run %d: page and cache state disagree", run)
		}
	}
}

// The timeline's temp file, in the user's output directory, is locked while written: one that a
// killed build left there (its lock gone with the process) is removed by the next build's timeline,
// a live writer's is not. It stayed, under a random name.
func TestWriteTimelineSweepsDeadTemps(t *testing.T) {
	out := t.TempDir()
	dead := filepath.Join(out, ".orkpipe-0123456789abcdef.tmp")
	live := filepath.Join(out, ".orkpipe-fedcba9876543210.tmp")
	testfiles.DeadAndLiveTemps(t, dead, live, []byte("<html>half a page"))
	path, err := progress.WriteTimeline(out, &reporthtml.Timeline{Target: "t", Jobs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if names, want := testfiles.DirNames(t, out), []string{filepath.Base(live), filepath.Base(path)}; !slices.Equal(names, want) {
		t.Fatalf("%s holds %v, want %v (the dead writer's temp file removed, the live one's kept)", out, names, want)
	}
}
