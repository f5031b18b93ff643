package executortest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
)

// PackStages are the stage kinds of the stories260K W4A8 build, the real pack stages included;
// PackBuild fails if one of them is missing from the plan.
var PackStages = []string{"tokenize", "calibrate", "finalize", "tile", "write-orkpack", "emit-stub", "screen", "verify-local", "report", "provenance"}

// packBudget is the memory budget of the suite's builds (the recipe declares ~365 MiB at once).
const packBudget = 4 << 30

// PackRecipe returns the suite's real build: the built-in W4A8 recipe
// (pipelines/recipes/w4a8-gptq-g32-rot.yaml: windowed GPTQ, I4_ROT_A8, groups of 32) on
// stories260K with the shared test data (../shared/testdata: the model, 23 calibration sequences
// of stories-calib.txt, screened on tinystories_sample.txt), as the recipe's path and the --set
// overrides. It skips the test where the shared test data is absent (outside CI).
func PackRecipe(t testing.TB) (path string, sets []string) {
	t.Helper()
	sets = []string{
		"source.model=" + testfiles.Path(t, "stories260K.gguf"),
		"calibration.corpus=" + testfiles.Path(t, "stories-calib.txt"),
		"calibration.sequences=23",
		"screen.text=" + testfiles.Path(t, "tinystories_sample.txt"),
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "pipelines", "recipes", "w4a8-gptq-g32-rot.yaml"), sets
		}
		if filepath.Dir(dir) == dir {
			t.Fatalf("no go.mod above %s", wd)
		}
	}
}

// PackBuild plans the PackRecipe build and runs it into a fresh store, every node through the
// executor newX returns for that store (nil: the engine's in-process executor), materializing the
// exports into a fresh directory. Every node must execute (the store is empty).
func PackBuild(t *testing.T, newX func(*artifacts.Store) engine.Executor) (*artifacts.Store, *engine.Result) {
	t.Helper()
	ctx := context.Background()
	path, sets := PackRecipe(t)
	rec, err := recipe.Load(path, sets...)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := build.New(rec, build.WithMemoryBudget(packBudget), build.WithOverrides(sets))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tg.Graph(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store := OpenStore(t)
	opts := []engine.Option{engine.WithJobs(2), engine.WithMemoryBudget(packBudget)}
	if newX != nil {
		opts = append(opts, engine.WithExecutor(newX(store)))
	}
	eng, err := engine.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := eng.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	res, err := eng.Build(ctx, tg.Name(), plan, engine.BuildOptions{OutDir: filepath.Join(t.TempDir(), "out")})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range res.Nodes {
		seen[n.Stage] = true
		if n.Outcome != engine.OutcomeExecuted && n.SameAs == "" {
			t.Errorf("node %s (%s): %v in a fresh store, want executed", n.ID, n.Stage, n.Outcome)
		}
	}
	for _, s := range PackStages {
		if !seen[s] {
			t.Errorf("the build has no %s node", s)
		}
	}
	return store, res
}

// ComparePack asserts that two builds of PackRecipe agree byte for byte: the same nodes with the
// same keys; for every node, the same outputs (names, digests, sizes) in both stores' action
// records, each output object with the same data extents in both stores (SEEK_DATA/SEEK_HOLE: a
// stub as sparse in one as in the other, its holes in the same places; not Stat_t.Blocks, which
// also counts the file system's own blocks: ext4 adds an extent-tree block to a file written in
// more than four extents, as a pack whose header is written last is); and the same exports,
// materialized with the same bytes.
func ComparePack(t *testing.T, wantStore *artifacts.Store, want *engine.Result, gotStore *artifacts.Store, got *engine.Result) {
	t.Helper()
	ctx := context.Background()
	keys := map[string]artifacts.Digest{}
	for _, n := range want.Nodes {
		keys[n.ID] = n.Key
	}
	if len(got.Nodes) != len(want.Nodes) {
		t.Errorf("%d nodes, want %d", len(got.Nodes), len(want.Nodes))
	}
	for _, n := range got.Nodes {
		wk, ok := keys[n.ID]
		if !ok || wk != n.Key {
			t.Errorf("node %s: key %s, want %s", n.ID, n.Key, wk)
			continue
		}
		wr, err := wantStore.GetAction(ctx, n.Key)
		if err != nil {
			t.Fatalf("node %s: %v", n.ID, err)
		}
		gr, err := gotStore.GetAction(ctx, n.Key)
		if err != nil {
			t.Fatalf("node %s: %v", n.ID, err)
		}
		if !slices.Equal(gr.Outputs, wr.Outputs) {
			t.Errorf("node %s (%s): outputs %v, want %v", n.ID, n.Stage, gr.Outputs, wr.Outputs)
			continue
		}
		for _, o := range gr.Outputs {
			if we, ge := objectExtents(t, wantStore, o), objectExtents(t, gotStore, o); !slices.Equal(ge, we) {
				t.Errorf("node %s (%s): output %s (%d bytes) has data extents %v, want %v", n.ID, n.Stage, o.Name, o.Size, ge, we)
			}
		}
	}
	if len(got.Exports) != len(want.Exports) {
		t.Errorf("exports %v, want %v", got.Exports, want.Exports)
	}
	for name, w := range want.Exports {
		if g := got.Exports[name]; g != w {
			t.Errorf("export %s: %v, want %v", name, g, w)
			continue
		}
		obj, err := artifacts.HashPath(ctx, got.Outputs[name])
		if err != nil || obj != w {
			t.Errorf("export %s materialized at %s: %v, %v; want %v", name, got.Outputs[name], obj, err, w)
		}
	}
}

// Pack builds PackRecipe with the in-process executor and with the executor newX makes, into two
// fresh stores, and asserts with ComparePack that they agree. It returns both results (the local
// one first).
func Pack(t *testing.T, newX Factory) (local, subject *engine.Result) {
	t.Helper()
	ls, local := PackBuild(t, nil)
	ss, subject := PackBuild(t, func(s *artifacts.Store) engine.Executor { return newX(t, s, nil) })
	ComparePack(t, ls, local, ss, subject)
	t.Logf("local: %d nodes, %d executed in %s; subject: %d nodes, %d executed in %s",
		len(local.Nodes), local.Executed, local.Duration, len(subject.Nodes), subject.Executed, subject.Duration)
	for name, o := range subject.Exports {
		t.Logf("export %s: %d bytes, %d blocks (local %d)", name, o.Size, objectBlocks(t, ss, o.Digest), objectBlocks(t, ls, o.Digest))
	}
	return local, subject
}

// objectExtents returns the data extents of the stored object o.
func objectExtents(t *testing.T, s *artifacts.Store, o artifacts.NamedObject) []sparse.Extent {
	t.Helper()
	p, err := s.Path(context.Background(), o.Digest)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exts, err := sparse.DataExtents(f, o.Size)
	if err != nil {
		t.Fatal(err)
	}
	return exts
}

// objectBlocks is the Stat_t.Blocks of the stored object d.
func objectBlocks(t *testing.T, s *artifacts.Store, d artifacts.Digest) int64 {
	t.Helper()
	p, err := s.Path(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}
