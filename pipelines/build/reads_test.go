package build

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/gguf"
	"orkpipe/pipelines/recipe"
)

// TestPlanReadsOnlySources checks Target.PlanKey's contract on real plans: every file planning
// reads (through reads.go, the only way this package reads: TestPlanReadsThroughSeams) is a source
// input of the graph it returns, so that the build memo's check of the source files' digests
// covers everything a plan depends on besides the plan key. The plans are planCases'.
// TestPlanSyscallReads checks the same plans for reads by any code, not only this package's.
func TestPlanReadsOnlySources(t *testing.T) {
	var reads []string
	oldOpen, oldStat, oldBoard := openModel, statFile, loadBoard
	t.Cleanup(func() { openModel, statFile, loadBoard = oldOpen, oldStat, oldBoard })
	openModel = func(ctx context.Context, path string) (*gguf.File, error) {
		reads = append(reads, path)
		return oldOpen(ctx, path)
	}
	statFile = func(path string) (os.FileInfo, error) {
		reads = append(reads, path)
		return oldStat(path)
	}
	loadBoard = func(nameOrPath string) (board.Profile, error) {
		if _, ok := board.Builtin(nameOrPath); !ok {
			reads = append(reads, nameOrPath)
		}
		return oldBoard(nameOrPath)
	}

	for _, tc := range planCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			tg := tc.target(t)
			reads = nil
			g, err := tg.Graph(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(reads) == 0 {
				t.Fatal("planning read nothing: the seams in reads.go are not in use")
			}
			sources := g.SourceFiles()
			for _, p := range reads {
				if !slices.Contains(sources, p) {
					t.Errorf("planning read %s, which is not a source input of the graph (sources: %v)", p, sources)
				}
			}
		})
	}
}

// TestPlanReadsThroughSeams: no file of this package but reads.go opens, stats or reads a file,
// a directory or the environment itself; everything goes through reads.go's seams.
func TestPlanReadsThroughSeams(t *testing.T) {
	forbidden := map[string][]string{
		"os":    {"Open", "OpenFile", "ReadFile", "Stat", "Lstat", "ReadDir", "DirFS", "Getenv", "LookupEnv", "Environ", "Getwd", "Readlink"},
		"gguf":  {"Open"},
		"board": {"Load"},
		"io/fs": {"ReadFile", "ReadDir", "Stat"},
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "reads.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && slices.Contains(forbidden[x.Name], sel.Sel.Name) {
				t.Errorf("%s: %s.%s: planning reads only through reads.go (Target.PlanKey's contract)", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
			}
			return true
		})
	}
}

// planCase is a recipe to plan: its file and its --set overrides.
type planCase struct {
	name, path string
	sets       []string
}

// target loads the recipe with its overrides and returns its target at a 4 GiB budget.
func (tc planCase) target(t *testing.T) *Target {
	r, err := recipe.Load(tc.path, tc.sets...)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := New(r, WithMemoryBudget(4<<30), WithOverrides(tc.sets))
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// planCases returns the plans the read tests check: the demo recipe; the built-in W4A8 recipe on
// stories260K with the shared test data; the demo with its board profile as a file; an MoE recipe
// with residency and a screen text (the screen also counts the held-out routing). Files they need are written
// under t.TempDir().
func planCases(t *testing.T) []planCase {
	profile, err := json.Marshal(board.RK3588())
	if err != nil {
		t.Fatal(err)
	}
	profilePath := filepath.Join(t.TempDir(), "rk3588.json")
	if err := os.WriteFile(profilePath, profile, 0o644); err != nil {
		t.Fatal(err)
	}
	moe := filepath.Join(t.TempDir(), "moe.yaml")
	if err := os.WriteFile(moe, []byte(`name: moe
source:
  synth: {layers: 2, n_embd: 64, n_ff: 96, n_head: 4, n_head_kv: 2, vocab: 360, ctx: 64, type: F32, seed: 23, n_expert: 16, n_expert_used: 2, router_skew: 1}
calibration: {corpus: `+testfiles.Path(t, "stories-calib.txt")+`, sequences: 16, ctx: 64, mode: oneshot, window: 1}
schemes:
  - {match: 'blk\.\d+\.ffn_\w+_exps\.weight', method: rtn, dtype: I8}
  - {match: 'blk\.\d+\.attn_\w+\.weight', method: rtn, dtype: I4_NATIVE}
screen: {text: `+testfiles.Path(t, "tinystories_sample.txt")+`, ctx: 64}
residency: {budget: "25%"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	recipes := filepath.Join("..", "recipes")
	return []planCase{
		{"demo", filepath.Join(recipes, "demo.yaml"), nil},
		{"w4a8 on stories260K", filepath.Join(recipes, "w4a8-gptq-g32-rot.yaml"), []string{
			"source.model=" + testfiles.Path(t, "stories260K.gguf"), "calibration.corpus=" + testfiles.Path(t, "stories-calib.txt"),
			"calibration.sequences=23", "screen.text=" + testfiles.Path(t, "tinystories_sample.txt")}},
		{"demo, board profile file", filepath.Join(recipes, "demo.yaml"), []string{"board=" + profilePath}},
		{"moe with residency", moe, nil},
	}
}
