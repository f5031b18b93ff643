// Package pipelines turns what a user names on the command line into an engine.Target: the
// built-in demo ("demo"); recipes (pipelines/recipe) plug in here. The engine itself is in
// pipelines/engine, progress output in pipelines/progress.
package pipelines

import (
	"fmt"

	"orkpipe/pipelines/demo"
	"orkpipe/pipelines/engine"
)

// Resolve returns the target named by arg.
func Resolve(arg string) (engine.Target, error) {
	switch arg {
	case demo.Name:
		return demo.New(), nil
	default:
		return nil, fmt.Errorf("unknown target %q: want %q (the built-in demo)", arg, demo.Name)
	}
}
