package build_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/recipe"
)

// TestPlanKey: the plan key (what a build memo may serve an unplanned build under) changes with
// everything Graph plans from that is not a source file of the graph — a field of the recipe, an
// override, the recipe file's path, the budget, GOMAXPROCS — and the same recipe loaded again keys
// the same.
func TestPlanKey(t *testing.T) {
	path := writeRecipe(t, "sequential")
	key := func(path string, mem int64, sets ...string) artifacts.Digest {
		t.Helper()
		rec, err := recipe.Load(path, sets...)
		if err != nil {
			t.Fatal(err)
		}
		tg, err := build.New(rec, build.WithMemoryBudget(mem), build.WithOverrides(sets))
		if err != nil {
			t.Fatal(err)
		}
		k, err := tg.PlanKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	base := key(path, 2<<30)
	if again := key(path, 2<<30); again != base {
		t.Fatalf("the same recipe keys %s, then %s", base, again)
	}
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(moved, body, 0o644); err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(edited, append(body, "output: elsewhere\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]func() artifacts.Digest{
		"override":           func() artifacts.Digest { return key(path, 2<<30, "calibration.sequences=3") },
		"override, no-op":    func() artifacts.Digest { return key(path, 2<<30, "calibration.sequences=4") },
		"recipe field":       func() artifacts.Digest { return key(edited, 2<<30) },
		"recipe file's path": func() artifacts.Digest { return key(moved, 2<<30) },
		"budget":             func() artifacts.Digest { return key(path, 3<<30) },
		"GOMAXPROCS": func() artifacts.Digest {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1))
			return key(path, 2<<30)
		},
	} {
		if k() == base {
			t.Errorf("%s: the plan key did not change", name)
		}
	}
}
