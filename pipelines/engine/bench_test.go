package engine_test

import (
	"context"
	"fmt"
	"testing"

	"orkpipe/pipelines/engine"
)

const benchNodes = 2000

// treeGraph is a binary tree of n test nodes: node i consumes node (i-1)/2.
func treeGraph(n int) *engine.Graph {
	g := engine.NewGraph()
	nodes := make([]*engine.Node, n)
	for i := range n {
		var inputs map[string]engine.Input
		if i > 0 {
			inputs = map[string]engine.Input{"in": nodes[(i-1)/2].Output("out")}
		}
		nodes[i] = node(g, fmt.Sprintf("n%04d", i), testParams{}, inputs)
	}
	g.Export("last", nodes[n-1].Output("out"))
	return g
}

// BenchmarkBuild2000 measures, in one run, the cold build of a 2,000-node graph (every node
// executes: scratch dir, stage run, adopt, action record) and the no-op rebuild of the same graph
// (every node cached: key material, action-record lookup). Each op includes building the graph
// and planning it. Compare ns/node of the two.
func BenchmarkBuild2000(b *testing.B) {
	run := func(b *testing.B, e *engine.Engine) *engine.Result {
		p, err := e.Plan(treeGraph(benchNodes))
		if err != nil {
			b.Fatal(err)
		}
		res, err := e.Build(context.Background(), "bench", p, engine.BuildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return res
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s := openStore(b, b.TempDir())
			e := newEngine(b, s, engine.WithJobs(2), engine.WithHistoryDir(b.TempDir()))
			b.StartTimer()
			if res := run(b, e); res.Executed != benchNodes {
				b.Fatalf("cold build executed %d", res.Executed)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchNodes, "ns/node")
	})
	b.Run("noop", func(b *testing.B) {
		s := openStore(b, b.TempDir())
		e := newEngine(b, s, engine.WithJobs(2), engine.WithHistoryDir(b.TempDir()))
		run(b, e)
		for b.Loop() {
			if res := run(b, e); res.Executed != 0 {
				b.Fatalf("no-op rebuild executed %d", res.Executed)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchNodes, "ns/node")
	})
}
