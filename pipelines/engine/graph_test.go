package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"orkpipe/pipelines/engine"
)

func TestPlanRejectsMalformedGraphs(t *testing.T) {
	s := openStore(t, t.TempDir())
	e := newEngine(t, s)
	for _, tc := range []struct {
		name  string
		build func(g *engine.Graph)
		want  string
	}{
		{"empty graph", func(g *engine.Graph) {}, "no nodes"},
		{"duplicate id", func(g *engine.Graph) {
			node(g, "a", testParams{}, nil)
			node(g, "a", testParams{Tag: "other"}, nil)
		}, `"a" used twice`},
		{"unknown stage", func(g *engine.Graph) { g.Add("a", "no-such-stage", nil, nil) }, "unknown stage kind"},
		{"bad params", func(g *engine.Graph) { g.Add("a", "test-node", json.RawMessage(`{"tag":"a","bogus":1}`), nil) }, "unknown field"},
		{"input not bound", func(g *engine.Graph) {
			g.Add("a", "test-node", testParams{Tag: "a", Inputs: []string{"in"}}, nil)
		}, "the stage takes [in]"},
		{"input bound but not taken", func(g *engine.Graph) {
			a := node(g, "a", testParams{}, nil)
			g.Add("b", "test-node", testParams{Tag: "b"}, map[string]engine.Input{"in": a.Output("out")})
		}, "inputs [in] bound"},
		{"no such output", func(g *engine.Graph) {
			a := node(g, "a", testParams{}, nil)
			node(g, "b", testParams{}, map[string]engine.Input{"in": a.Output("result")})
		}, `output "result" of node "a"`},
		{"export of a source file", func(g *engine.Graph) {
			node(g, "a", testParams{}, nil)
			g.Export("f", engine.File("/etc/hostname"))
		}, "must be a node output"},
		{"export name used twice", func(g *engine.Graph) {
			a := node(g, "a", testParams{}, nil)
			g.Export("x", a.Output("out"))
			g.Export("x", a.Output("out"))
		}, "unique file name"},
		{"export name with a slash", func(g *engine.Graph) {
			a := node(g, "a", testParams{}, nil)
			g.Export("../x", a.Output("out"))
		}, "unique file name"},
		{"node of another graph", func(g *engine.Graph) {
			other := engine.NewGraph()
			a := node(other, "a", testParams{}, nil)
			node(g, "b", testParams{}, map[string]engine.Input{"in": a.Output("out")})
		}, "another graph"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := engine.NewGraph()
			tc.build(g)
			_, err := e.Plan(g)
			if !errors.Is(err, engine.ErrGraph) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Plan: %v; want ErrGraph mentioning %q", err, tc.want)
			}
		})
	}
}
