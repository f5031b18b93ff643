package build_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/recipe"
)

// TestBuiltinRecipesPlan plans every built-in recipe on stories260K (a real llama-family GGUF with
// a 172-wide ffn_down), given the model, corpus and text by --set, and checks the node kinds and
// the dtypes each one assigns.
func TestBuiltinRecipesPlan(t *testing.T) {
	model := testfiles.Path(t, "stories260K.gguf")
	calib := testfiles.Path(t, "stories-calib.txt")
	text := testfiles.Path(t, "stories-generated.txt")
	tests := []struct {
		recipe    string
		calibrate bool
		nodes     int // 35 weights of stories260K
	}{
		{"w4a4-rtn", false, 35*2 + 6},
		{"int8", false, 35*2 + 6},
		{"w4a4-gptq-g32-rot", true, 35*2 + 6 + 2}, // tokenize, one auto window
		{"w4a8-gptq-g32-rot", true, 35*2 + 6 + 2}, //
		{"mixed-i8rot", true, 35*2 + 6 + 2},       //
		{"demo", true, 35*2 + 6 + 1 + 5 + 4},      // tokenize, 5 windows, 4 propagates
		{"w4a8-rtn-imatrix", false, 35*2 + 6},
	}
	es, _ := storiesHessians(t)
	imatrix := writeImatrix(t, t.TempDir(), es, false)
	for _, tc := range tests {
		t.Run(tc.recipe, func(t *testing.T) {
			sets := []string{"source.model=" + model, "screen.text=" + text, "calibration.corpus=" + calib, "calibration.sequences=23"}
			if tc.recipe == "demo" {
				sets = nil
			} else if !tc.calibrate {
				sets = sets[:2]
			}
			if strings.Contains(tc.recipe, "imatrix") {
				sets = append(sets, "imatrix="+imatrix)
			}
			r, err := recipe.Load(filepath.Join("..", "recipes", tc.recipe+".yaml"), sets...)
			if err != nil {
				t.Fatal(err)
			}
			tg, err := build.New(r, build.WithMemoryBudget(4<<30))
			if err != nil {
				t.Fatal(err)
			}
			g, err := tg.Graph(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := len(g.Nodes()); got != tc.nodes {
				t.Errorf("%d nodes, want %d: %v", got, tc.nodes, nodeIDs(g))
			}
			if (g.Node("tokenize") != nil) != tc.calibrate {
				t.Errorf("tokenize node present = %v, want %v", g.Node("tokenize") != nil, tc.calibrate)
			}
			for _, id := range []string{"write-orkpack", "emit-stub", "screen", "verify-local", "report", "provenance"} {
				if g.Node(id) == nil {
					t.Errorf("no %s node", id)
				}
			}
			if tc.recipe == "w4a8-rtn-imatrix" {
				if s := r.SchemeFor("blk.0.ffn_down.weight"); s == nil || s.Importance != "imatrix" || s.Rotation != "none" {
					t.Errorf("w4a8-rtn-imatrix: ffn_down scheme %+v", s)
				}
			}
			if tc.recipe == "mixed-i8rot" {
				if s := r.SchemeFor("blk.0.ffn_down.weight"); s == nil || s.DType != "I8_ROT" {
					t.Errorf("mixed-i8rot: ffn_down scheme %+v", s)
				}
				if s := r.SchemeFor("blk.0.attn_q.weight"); s == nil || !strings.HasPrefix(s.DType, "I4") {
					t.Errorf("mixed-i8rot: attn_q scheme %+v", s)
				}
			}
		})
	}
}
