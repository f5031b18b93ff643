package stages_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"orkpipe/stages"
)

// TestScreenRoutingSpec: a screen with Routing (the build's held-out routing) adds the output
// routing.json for an MoE model, is refused for a dense one, and without it binds as before (no
// routing output; the params' JSON, and so every existing screen node's key, unchanged).
func TestScreenRoutingSpec(t *testing.T) {
	kind, err := stages.Lookup("screen")
	if err != nil {
		t.Fatal(err)
	}
	moe := stages.ModelShape{Layers: 2, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 16, Vocab: 360, Experts: 4, ExpertsUsed: 2}
	dense := moe
	dense.Experts, dense.ExpertsUsed = 0, 0
	for _, c := range []struct {
		name    string
		p       stages.ScreenParams
		outputs []string
		refused string
	}{
		{"moe with routing", stages.ScreenParams{Shape: moe, Ctx: 16, Routing: true}, []string{"screen.json", "routing.json"}, ""},
		{"moe without", stages.ScreenParams{Shape: moe, Ctx: 16}, []string{"screen.json"}, ""},
		{"dense without", stages.ScreenParams{Shape: dense, Ctx: 16}, []string{"screen.json"}, ""},
		{"dense with routing", stages.ScreenParams{Shape: dense, Ctx: 16, Routing: true}, nil, "n_expert 0"},
	} {
		b, err := json.Marshal(c.p)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"routing"`); got != c.p.Routing {
			t.Errorf("%s: params %s: the routing key present = %v, want %v (omitted when false)", c.name, b, got, c.p.Routing)
		}
		bound, err := kind.Bind(b)
		if c.refused != "" {
			if !errors.Is(err, stages.ErrBadParams) || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("%s: err = %v, want ErrBadParams naming %s", c.name, err, c.refused)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := bound.Spec().Outputs; !slices.Equal(got, c.outputs) {
			t.Errorf("%s: outputs %v, want %v", c.name, got, c.outputs)
		}
	}
}
