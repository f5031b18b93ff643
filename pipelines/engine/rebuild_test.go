package engine_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// sixNodes builds a -> x -> y -> z <- b -> w, with z and w exported. xTag changes x's params.
func sixNodes(xTag string) *engine.Graph {
	g := engine.NewGraph()
	a := node(g, "a", testParams{Size: 4096}, nil)
	b := node(g, "b", testParams{Size: 4096}, nil)
	x := node(g, "x", testParams{Tag: xTag}, map[string]engine.Input{"in": a.Output("out")})
	y := node(g, "y", testParams{}, map[string]engine.Input{"in": x.Output("out")})
	z := node(g, "z", testParams{}, map[string]engine.Input{"l": y.Output("out"), "r": b.Output("out")})
	w := node(g, "w", testParams{}, map[string]engine.Input{"in": b.Output("out")})
	g.Export("z.bin", z.Output("out"))
	g.Export("w.bin", w.Output("out"))
	return g
}

func TestRebuildExecutesOnlyWhatChanged(t *testing.T) {
	resetCounts()
	s := openStore(t, t.TempDir())
	e := newEngine(t, s)
	out := t.TempDir()
	opts := engine.BuildOptions{OutDir: out}
	ctx := context.Background()

	step := func(name string, g *engine.Graph, wantTags string, wantExecuted, wantCached int) *engine.Result {
		t.Helper()
		resetCounts()
		res := mustBuild(t, e, "six", g, opts)
		if got := executedTags(); got != wantTags {
			t.Errorf("%s: executed stages %q, want %q", name, got, wantTags)
		}
		if res.Executed != wantExecuted || res.Cached != wantCached || res.Failed != 0 || res.Skipped != 0 {
			t.Errorf("%s: executed %d cached %d failed %d skipped %d, want executed %d cached %d",
				name, res.Executed, res.Cached, res.Failed, res.Skipped, wantExecuted, wantCached)
		}
		return res
	}

	first := step("cold build", sixNodes("x"), "a,b,w,x,y,z", 6, 0)
	step("unchanged rebuild", sixNodes("x"), "", 0, 6)
	step("x's parameter changed", sixNodes("x2"), "x2,y,z", 3, 3)
	step("back to the first parameter", sixNodes("x"), "", 0, 6)

	// Delete y's output object: only y runs again (its output comes out identical, so z stays cached).
	yOut := objectOf(t, s, nodeResult(t, first, "y").Key)
	if err := os.Remove(objectPath(t, s, yOut)); err != nil {
		t.Fatal(err)
	}
	step("y's output deleted", sixNodes("x"), "y", 1, 5)

	// Flip a byte of the exported z: found when verifying the exports, quarantined, z runs again.
	// (The object is hardlinked into out, so that copy changed too and materializing over it is
	// refused as a clobber: materialize into a fresh directory from now on.)
	opts.OutDir = t.TempDir()
	zOut := objectOf(t, s, nodeResult(t, first, "z").Key)
	flipByte(t, objectPath(t, s, zOut), 3)
	res := step("z's output corrupted", sixNodes("x"), "z", 1, 5)
	if res.Passes != 2 || quarantined(t, s) != 1 {
		t.Errorf("corrupt export: %d passes, %d quarantined objects; want 2 and 1", res.Passes, quarantined(t, s))
	}
	if err := s.Verify(ctx, zOut); err != nil {
		t.Errorf("z's output after the rebuild: %v", err)
	}

	// Flip a byte of x's output, then change y: y verifies its input before running, x's object
	// is quarantined and x runs again, then y and z.
	xOut := objectOf(t, s, nodeResult(t, first, "x").Key)
	flipByte(t, objectPath(t, s, xOut), 0)
	g := engine.NewGraph()
	a := node(g, "a", testParams{Size: 4096}, nil)
	b := node(g, "b", testParams{Size: 4096}, nil)
	x := node(g, "x", testParams{}, map[string]engine.Input{"in": a.Output("out")})
	y := node(g, "y", testParams{Tag: "y2"}, map[string]engine.Input{"in": x.Output("out")})
	z := node(g, "z", testParams{}, map[string]engine.Input{"l": y.Output("out"), "r": b.Output("out")})
	g.Export("z.bin", z.Output("out"))
	res = step("x's output corrupted, y changed", g, "x,y2,z", 3, 2)
	if res.Passes != 2 || quarantined(t, s) != 2 {
		t.Errorf("corrupt input of a changed node: %d passes, %d quarantined objects; want 2 and 2", res.Passes, quarantined(t, s))
	}
	rep, err := s.VerifyAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Corrupt) != 0 {
		t.Errorf("VerifyAll after the rebuilds: %+v", rep.Corrupt)
	}
	if b, err := os.ReadFile(filepath.Join(out, "z.bin")); err != nil || len(b) == 0 {
		t.Errorf("materialized z.bin: %v (%d bytes)", err, len(b))
	}
}

// objectOf returns the single output object of the action record of key.
func objectOf(t *testing.T, s *artifacts.Store, key artifacts.Digest) artifacts.Digest {
	t.Helper()
	rec, err := s.GetAction(context.Background(), key)
	if err != nil {
		t.Fatalf("action %s: %v", key, err)
	}
	return rec.Outputs[0].Digest
}

// TestSourceChangedWithMtimeRestored is the rsync -a case: the content changes, the mtime is put
// back; the stat cache must notice (ctime/inode) and the dependents must run again.
func TestSourceChangedWithMtimeRestored(t *testing.T) {
	s := openStore(t, t.TempDir())
	e := newEngine(t, s)
	src := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(src, []byte("the quick brown fox"), 0o644); err != nil {
		t.Fatal(err)
	}
	graph := func() *engine.Graph {
		g := engine.NewGraph()
		r := node(g, "read", testParams{}, map[string]engine.Input{"src": engine.File(src)})
		c := node(g, "child", testParams{}, map[string]engine.Input{"in": r.Output("out")})
		g.Export("child.bin", c.Output("out"))
		return g
	}
	resetCounts()
	first := mustBuild(t, e, "rsync", graph(), engine.BuildOptions{})
	if first.Executed != 2 {
		t.Fatalf("cold build executed %d, want 2", first.Executed)
	}
	resetCounts()
	if res := mustBuild(t, e, "rsync", graph(), engine.BuildOptions{}); res.Executed != 0 {
		t.Fatalf("unchanged rebuild executed %d, want 0", res.Executed)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a ctime that differs even on coarse clocks
	if err := os.WriteFile(src, []byte("the quick brown cat"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(src)
	if st2.Size() != st.Size() || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("setup: size or mtime differ (%d %v vs %d %v)", st2.Size(), st2.ModTime(), st.Size(), st.ModTime())
	}
	resetCounts()
	res := mustBuild(t, e, "rsync", graph(), engine.BuildOptions{})
	if got := executedTags(); got != "child,read" || res.Executed != 2 {
		t.Errorf("after the content change with mtime restored: executed %q (%d), want child,read (2)", got, res.Executed)
	}
	if nodeResult(t, res, "read").Key == nodeResult(t, first, "read").Key {
		t.Errorf("read's key did not change with its source content")
	}
}

// TestIdenticalKeyMaterialRunsOnce: two nodes meant to differ but with identical key material run
// once; the second is served by the first, and explain reports the pair.
func TestIdenticalKeyMaterialRunsOnce(t *testing.T) {
	resetCounts()
	s := openStore(t, t.TempDir())
	hist := t.TempDir()
	e := newEngine(t, s, engine.WithHistoryDir(hist))
	g := engine.NewGraph()
	base := node(g, "base", testParams{}, nil)
	// Two "arms" whose intended difference never reached the params: identical key material.
	arm1 := node(g, "arm-g32", testParams{Tag: "arm"}, map[string]engine.Input{"in": base.Output("out")})
	arm2 := node(g, "arm-g64", testParams{Tag: "arm"}, map[string]engine.Input{"in": base.Output("out")})
	g.Export("g32", arm1.Output("out"))
	g.Export("g64", arm2.Output("out"))
	res := mustBuild(t, e, "arms", g, engine.BuildOptions{})
	if c := counts(); c["arm"] != 1 || res.Executed != 2 || res.Cached != 1 {
		t.Errorf("arms executed %d times; result executed %d cached %d; want 1, 2, 1", c["arm"], res.Executed, res.Cached)
	}
	if a, b := nodeResult(t, res, "arm-g32"), nodeResult(t, res, "arm-g64"); a.Key != b.Key || a.SameAs+b.SameAs == "" {
		t.Errorf("arms: keys %s %s, same-as %q %q", a.Key, b.Key, a.SameAs, b.SameAs)
	}
	x, err := engine.Explain(context.Background(), hist, "arms")
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Identical) != 1 || len(x.Identical[0]) != 2 {
		t.Errorf("explain identical = %v, want one pair", x.Identical)
	}
}

func TestExplainNamesTheChangedField(t *testing.T) {
	s := openStore(t, t.TempDir())
	hist := t.TempDir()
	e := newEngine(t, s, engine.WithHistoryDir(hist))
	if _, err := engine.Explain(context.Background(), hist, "six"); !errors.Is(err, engine.ErrNoHistory) {
		t.Fatalf("explain before any build: %v, want ErrNoHistory", err)
	}
	mustBuild(t, e, "six", sixNodes("x"), engine.BuildOptions{})
	mustBuild(t, e, "six", sixNodes("x-new"), engine.BuildOptions{})
	x, err := engine.Explain(context.Background(), hist, "six")
	if err != nil {
		t.Fatal(err)
	}
	if x.Ran != 3 || x.Cached != 3 || len(x.Nodes) != 3 {
		t.Fatalf("explain: ran %d cached %d nodes %+v; want 3, 3", x.Ran, x.Cached, x.Nodes)
	}
	want := map[string]string{"x": "params.tag", "y": "inputs.in", "z": "inputs.l"}
	for _, n := range x.Nodes {
		if len(n.Changes) != 1 || n.Changes[0].Field != want[n.Node] {
			t.Errorf("explain %s: changes %+v, want one change of %s", n.Node, n.Changes, want[n.Node])
		}
	}
	if c := x.Nodes[0].Changes[0]; x.Nodes[0].Node == "x" && (c.Old != `"x"` || c.New != `"x-new"`) {
		t.Errorf("x: %s -> %s, want \"x\" -> \"x-new\"", c.Old, c.New)
	}
}

// TestToolDigestIsKeyMaterial: rebuilding an external tool in place (same path, same mtime) re-runs
// the nodes that use it, and explain names the tool.
func TestToolDigestIsKeyMaterial(t *testing.T) {
	s := openStore(t, t.TempDir())
	hist := t.TempDir()
	e := newEngine(t, s, engine.WithHistoryDir(hist))
	tool := filepath.Join(t.TempDir(), "llama-perplexity")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho v1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	graph := func() *engine.Graph {
		g := engine.NewGraph()
		g.Add("screen", "test-tool", toolParams{Tool: tool}, nil)
		return g
	}
	resetCounts()
	mustBuild(t, e, "tool", graph(), engine.BuildOptions{})
	mustBuild(t, e, "tool", graph(), engine.BuildOptions{})
	if c := counts()["tool"]; c != 1 {
		t.Fatalf("tool stage ran %d times in two identical builds, want 1", c)
	}
	st, _ := os.Stat(tool)
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(tool, st.ModTime(), st.ModTime())
	res := mustBuild(t, e, "tool", graph(), engine.BuildOptions{})
	if c := counts()["tool"]; c != 2 || res.Executed != 1 {
		t.Fatalf("after rebuilding the tool: ran %d times (executed %d), want 2 (1)", c, res.Executed)
	}
	x, err := engine.Explain(context.Background(), hist, "tool")
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Nodes) != 1 || len(x.Nodes[0].Changes) != 1 || x.Nodes[0].Changes[0].Field != "tools.bin" {
		t.Errorf("explain: %+v, want one change of tools.bin", x.Nodes)
	}
}

// TestDiffMaterialNamesNumerics: a key that changed only in its numerics (a pure-Go and a -tags
// blas binary) is explained as such.
func TestDiffMaterialNamesNumerics(t *testing.T) {
	old := stages.KeyMaterial{Stage: "calibrate", Version: 3, Params: []byte(`{"a":1}`)}
	cur := old
	cur.Numerics = "openblas Haswell blake3:00"
	got := engine.DiffMaterial(old, cur)
	if len(got) != 1 || got[0] != (engine.Change{Field: "numerics", Old: "", New: cur.Numerics}) {
		t.Errorf("DiffMaterial: %+v, want one numerics change", got)
	}
}

// An action record that cannot be used is reported once per build, not once for each look at it
// (the plan's status, and the build's looks before and after the node's lock).
func TestUnusableRecordWarnedOnce(t *testing.T) {
	resetCounts()
	s := openStore(t, t.TempDir())
	first := mustBuild(t, newEngine(t, s), "six", sixNodes("x"), engine.BuildOptions{})
	key := nodeResult(t, first, "x").Key.Hex()
	rec := filepath.Join(s.Dir(), "actions", key[:2], key+".json")
	if err := os.WriteFile(rec, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	e := newEngine(t, s, engine.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	ctx := context.Background()
	p, err := e.Plan(sixNodes("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Status(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Build(ctx, "six", p, engine.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String(), "action record unusable"); n != 1 {
		t.Fatalf("%d warnings for one unusable record, want 1:\n%s", n, log.String())
	}
}
