package build_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
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
		nodes     int // 35 weights of stories260K: finalize and tile, or one rtn-tile node each; the tail: 8 (incl. two sha256)
	}{
		{"w4a4-rtn", false, 35 + 8},
		{"int8", false, 35 + 8},
		{"w4a4-gptq-g32-rot", true, 35*2 + 8 + 2}, // tokenize, one auto window
		{"w4a8-gptq-g32-rot", true, 35*2 + 8 + 2}, //
		{"mixed-i8rot", true, 35*2 + 8 + 2},       //
		{"demo", true, 35*2 + 8 + 1 + 5 + 4},      // tokenize, 5 windows, 4 propagates
		{"w4a8-rtn-imatrix", false, 35 + 8},
		{"w4a8-best", true, 35*2 + 8 + 2},
		{"w4a4-best", true, 35*3 + 8 + 2}, // an act-clip node per weight
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
			if strings.HasSuffix(tc.recipe, "-best") {
				down, q := r.SchemeFor("blk.0.ffn_down.weight"), r.SchemeFor("blk.0.attn_q.weight")
				if down == nil || q == nil || down.RotationBlock != 256 || q.RotationBlock != 0 || down.RotationSearch != 8 || q.RotationSearch != 8 {
					t.Errorf("%s: ffn_down scheme %+v, attn_q scheme %+v: want 8 seeds each, rotation_block 256 for ffn_down only", tc.recipe, down, q)
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

// TestBuiltinRecipesMatchHybrids: on the hybrid fixtures (../shared/testdata/hybrid/REFERENCE.md lists
// their tensors) every built-in recipe's schemes match exactly the matmul weights the blocks read through
// their input sites (the MoE router excepted, which stays float) and no other block tensor, and each
// recipe plans.
func TestBuiltinRecipesMatchHybrids(t *testing.T) {
	corpus := testfiles.Path(t, "stories-calib.txt")
	text := testfiles.Path(t, "stories-generated.txt")
	for _, fixture := range []string{"tiny-qwen35.gguf", "tiny-lfm2moe.gguf"} {
		path := testfiles.Path(t, fixture)
		f, err := gguf.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := model.ConfigFromGGUF(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, rc := range []struct {
			name              string
			calibrate, matrix bool
		}{{"w4a4-rtn", false, false}, {"int8", false, false}, {"w4a4-gptq-g32-rot", true, false}, {"w4a8-gptq-g32-rot", true, false},
			{"mixed-i8rot", true, false}, {"w4a8-rtn-imatrix", false, true}, {"qwen35", true, false},
			{"w4a8-best", true, false}, {"w4a4-best", true, false}, {"lfm2moe", true, false}} {
			name := rc.name
			if (name == "qwen35" || name == "lfm2moe") && cfg.Arch != name {
				continue // the seed models' own recipes
			}
			t.Run(fixture+"/"+name, func(t *testing.T) {
				sets := []string{"source.model=" + path, "screen.text=" + text}
				if rc.calibrate {
					sets = append(sets, "calibration.corpus="+corpus)
				}
				if rc.matrix {
					sets = append(sets, "imatrix="+path) // planning would read it: not planned below
				}
				r, err := recipe.Load(filepath.Join("..", "recipes", name+".yaml"), sets...)
				if err != nil {
					t.Fatal(err)
				}
				matmuls := 0
				for _, ti := range f.Tensors {
					probe := ti.Name
					if len(ti.Shape) == 3 {
						probe += "#0"
					}
					_, in, _, site := cfg.SiteOf(probe)
					l := 0
					fmt.Sscanf(ti.Name, "blk.%d.", &l)
					want := site && strings.HasPrefix(ti.Name, "blk.") && calib.Captured(cfg.Sites(l)[in])
					if want {
						matmuls++
					}
					if got := r.SchemeFor(ti.Name) != nil; got != want {
						t.Errorf("%s: matched %v, want %v (a matmul weight of its block: %v)", ti.Name, got, want, want)
					}
				}
				if matmuls == 0 {
					t.Fatal("no matmul weight found")
				}
				if rc.matrix {
					return // planning checks the imatrix file
				}
				tg, err := build.New(r, build.WithMemoryBudget(4<<30))
				if err != nil {
					t.Fatal(err)
				}
				_, err = tg.Graph(context.Background())
				if name == "w4a4-best" && cfg.NExpert > 0 { // act_clip: search is refused for expert slices
					if err == nil || !strings.Contains(err.Error(), "act_clip") {
						t.Fatalf("w4a4-best on an MoE model planned (err %v), want the act_clip refusal", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
