package pipelines_test

import (
	"context"
	"strings"
	"testing"

	"orkpipe/pipelines"
)

func TestResolve(t *testing.T) {
	tg, err := pipelines.Resolve("demo")
	if err != nil || tg.Name() != "demo" {
		t.Fatalf("Resolve(demo) = %v, %v", tg, err)
	}
	g, err := tg.Graph(context.Background())
	if err != nil || len(g.Nodes()) != 5 || len(g.Exports()) != 2 {
		t.Fatalf("demo graph: %v", err)
	}
	if _, err := pipelines.Resolve("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Resolve(nope): %v", err)
	}
}
