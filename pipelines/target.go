// Package pipelines turns what a user names on the command line into an engine.Target: the
// built-in demo ("demo") or a recipe file (pipelines/recipe, planned by pipelines/build). The
// engine itself is in pipelines/engine, progress output in pipelines/progress.
package pipelines

import (
	"fmt"
	"os"

	"orkpipe/pipelines/build"
	"orkpipe/pipelines/demo"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
	"orkpipe/pipelines/verify"
)

// Resolve returns the target named by arg: "demo", or the path of a recipe file, which is loaded
// with the overrides sets ("dotted.path=value") and planned under the memory budget mem (bytes) with
// opts (build.WithHostSpeeds; the demo takes none).
func Resolve(arg string, mem int64, sets []string, opts ...build.Option) (engine.Target, error) {
	if arg == demo.Name {
		if len(sets) > 0 {
			return nil, fmt.Errorf("--set applies to recipes, not to the built-in demo")
		}
		return demo.New(), nil
	}
	if _, err := os.Stat(arg); err != nil {
		return nil, fmt.Errorf("unknown target %q: want %q (the built-in demo) or a recipe file (%v)", arg, demo.Name, err)
	}
	r, err := recipe.Load(arg, sets...)
	if err != nil {
		return nil, err
	}
	if r.BoardVerify != nil {
		verify.RegisterKind() // the verify-board node is planned like any other (it is served by attestations)
	}
	return build.New(r, append([]build.Option{build.WithMemoryBudget(mem), build.WithOverrides(sets)}, opts...)...)
}
