package engine

import (
	"context"

	"orkpipe/artifacts"
)

// MemoUseInterval exports memoUseInterval to the external tests.
const MemoUseInterval = memoUseInterval

// SetNumerics makes the build memo see numerics n (what stages.Numerics returns for another
// OpenBLAS library, kernel set or thread count) until the test ends.
func SetNumerics(t interface{ Cleanup(func()) }, n string) {
	old := numericsVia
	numericsVia = func(context.Context, func(context.Context, string) (artifacts.Object, error)) (string, error) {
		return n, nil
	}
	t.Cleanup(func() { numericsVia = old })
}
