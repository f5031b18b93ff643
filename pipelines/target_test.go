package pipelines_test

import (
	"context"
	"strings"
	"testing"

	"orkpipe/pipelines"
)

func TestResolve(t *testing.T) {
	tg, err := pipelines.Resolve("demo", 1<<30, nil)
	if err != nil || tg.Name() != "demo" {
		t.Fatalf("Resolve(demo) = %v, %v", tg, err)
	}
	g, err := tg.Graph(context.Background())
	if err != nil || len(g.Nodes()) != 5 || len(g.Exports()) != 2 {
		t.Fatalf("demo graph: %v", err)
	}
	if _, err := pipelines.Resolve("nope", 1<<30, nil); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Resolve(nope): %v", err)
	}
	rt, err := pipelines.Resolve("recipes/demo.yaml", 1<<30, []string{"calibration.sequences=4"})
	if err != nil || rt.Name() != "demo" {
		t.Fatalf("Resolve(recipes/demo.yaml) = %v, %v", rt, err)
	}
	if _, err := pipelines.Resolve("recipes/demo.yaml", 1<<30, []string{"calibration.sequencez=4"}); err == nil || !strings.Contains(err.Error(), "sequencez") {
		t.Errorf("Resolve with a bad override: %v", err)
	}
}
