package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// drift is mixed into the output of the "test-drift" stage kind: setting it is a stage whose output
// changed without a version bump (what BuildOptions.Check exists to find).
var drift struct {
	sync.Mutex
	salt string
}

func setDrift(s string) {
	drift.Lock()
	drift.salt = s
	drift.Unlock()
}

func init() {
	stages.Register(stages.Define("test-drift", 1, func(p testParams) (stages.Spec, error) {
		return stages.Spec{Inputs: p.Inputs, Outputs: []string{"out"}, PeakMemory: 1 << 20}, nil
	}, func(_ context.Context, p testParams, req stages.Request) error {
		var b []byte
		names := append([]string(nil), p.Inputs...)
		sort.Strings(names)
		for _, n := range names {
			in, err := os.ReadFile(req.Inputs[n].Path)
			if err != nil {
				return err
			}
			b = append(b, in...)
		}
		drift.Lock()
		b = fmt.Appendf(b, "<%s %s>", p.Tag, drift.salt)
		drift.Unlock()
		return os.WriteFile(req.Output("out"), b, 0o644)
	}))
}

// driftChain is a -> d -> z (d of kind test-drift), z exported.
func driftChain() *engine.Graph {
	g := engine.NewGraph()
	a := node(g, "a", testParams{Size: 1024}, nil)
	d := g.Add("d", "test-drift", testParams{Tag: "d", Inputs: []string{"in"}}, map[string]engine.Input{"in": a.Output("out")})
	z := node(g, "z", testParams{}, map[string]engine.Input{"in": d.Output("out")})
	g.Export("z.bin", z.Output("out"))
	return g
}

func checkAll(string) bool { return true }

// TestCheckReproducesEveryNode: a build with Check over a fully cached graph runs every node again,
// reports each executed and checked (node_finished with checked), and materializes the exports.
func TestCheckReproducesEveryNode(t *testing.T) {
	setDrift("v1")
	s := openStore(t, t.TempDir())
	rec := &engine.Recorder{}
	e := newEngine(t, s, engine.WithSink(rec))
	mustBuild(t, e, "drift", driftChain(), engine.BuildOptions{})
	resetCounts()
	out := t.TempDir()
	res := mustBuild(t, e, "drift", driftChain(), engine.BuildOptions{OutDir: out, Check: checkAll})
	if res.Executed != 3 || res.Checked != 3 || res.Cached != 0 || res.Failed != 0 {
		t.Fatalf("checked build: executed %d (checked %d), cached %d, failed %d; want 3 (3), 0, 0", res.Executed, res.Checked, res.Cached, res.Failed)
	}
	if got := executedTags(); got != "a,z" {
		t.Errorf("test-node runs %q, want a,z (and d, another kind)", got)
	}
	checked := 0
	for _, ev := range rec.Events() {
		if ev.Event == engine.EventNodeFinished && ev.Checked {
			checked++
		}
	}
	if checked != 3 {
		t.Errorf("%d node_finished events with checked, want 3", checked)
	}
	if _, err := os.Stat(filepath.Join(out, "z.bin")); err != nil {
		t.Errorf("export after a reproduced check: %v", err)
	}
}

// TestCheckFindsAChangedStage: after a stage's output changes under an unchanged key, a plain
// rebuild serves the old record (the failure Check exists for); a build checking that stage fails
// with ErrNotReproducible naming the node and both digests, counts it failed, still checks its
// dependent on the recorded output, materializes nothing, and leaves the record as it was.
func TestCheckFindsAChangedStage(t *testing.T) {
	setDrift("v1")
	t.Cleanup(func() { setDrift("v1") })
	s := openStore(t, t.TempDir())
	e := newEngine(t, s)
	ctx := context.Background()
	first := mustBuild(t, e, "drift", driftChain(), engine.BuildOptions{})
	dKey := nodeResult(t, first, "d").Key
	dOut := objectOf(t, s, dKey)

	setDrift("v2") // the stage changed; its version did not
	if res := mustBuild(t, e, "drift", driftChain(), engine.BuildOptions{}); res.Cached != 3 {
		t.Fatalf("plain rebuild after the change: cached %d, want 3 (the stale record is served)", res.Cached)
	}

	for _, tc := range []struct {
		name        string
		check       func(string) bool
		wantChecked int
		wantCached  int
	}{
		{"only the changed stage", func(stage string) bool { return stage == "test-drift" }, 0, 2},
		{"every stage", checkAll, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			res, err := build(t, ctx, e, "drift", driftChain(), engine.BuildOptions{OutDir: out, Check: tc.check})
			if !errors.Is(err, engine.ErrNotReproducible) {
				t.Fatalf("checked build: %v, want ErrNotReproducible", err)
			}
			for _, want := range []string{`"d"`, dKey.String(), dOut.String()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
			if res.Failed != 1 || res.Checked != tc.wantChecked || res.Cached != tc.wantCached || res.Skipped != 0 {
				t.Errorf("failed %d, checked %d, cached %d, skipped %d; want 1, %d, %d, 0", res.Failed, res.Checked, res.Cached, res.Skipped, tc.wantChecked, tc.wantCached)
			}
			if n := nodeResult(t, res, "d"); n.Outcome != engine.OutcomeFailed || !errors.Is(n.Err, engine.ErrNotReproducible) {
				t.Errorf("node d: %v (%v), want failed with ErrNotReproducible", n.Outcome, n.Err)
			}
			if entries, _ := os.ReadDir(out); len(entries) != 0 {
				t.Errorf("a build with a difference materialized %d files", len(entries))
			}
			if got := objectOf(t, s, dKey); got != dOut {
				t.Errorf("d's record now names %s, want the original %s", got, dOut)
			}
		})
	}

	// The store still serves the original record, and its object verifies.
	res := mustBuild(t, e, "drift", driftChain(), engine.BuildOptions{})
	if res.Cached != 3 {
		t.Errorf("rebuild after the checks: cached %d, want 3", res.Cached)
	}
	if err := s.Verify(ctx, dOut); err != nil {
		t.Errorf("d's recorded output after the checks: %v", err)
	}
}

// TestCheckSkipsTheMemo: a build memo never serves a checking build.
func TestCheckSkipsTheMemo(t *testing.T) {
	setDrift("v1")
	s := openStore(t, t.TempDir())
	e := newEngine(t, s)
	mustBuild(t, e, "drift", driftChain(), engine.BuildOptions{})
	ctx := context.Background()
	if res, err := e.BuildFromMemo(ctx, "drift", driftChain(), engine.BuildOptions{}); err != nil || res == nil {
		t.Fatalf("memo after a build: %v, %v; want served", res, err)
	}
	if res, err := e.BuildFromMemo(ctx, "drift", driftChain(), engine.BuildOptions{Check: checkAll}); err != nil || res != nil {
		t.Fatalf("memo with Check: %v, %v; want a miss (nil, nil)", res, err)
	}
}
