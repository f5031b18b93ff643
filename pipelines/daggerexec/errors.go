package daggerexec

import (
	"context"

	"orkpipe/pipelines/daggerenv"
)

// Sentinel errors of the package (package daggerenv's); returned errors wrap one of them with what
// was found and what to do.
var (
	// ErrNoEngine: no Dagger engine is configured, or the configured one does not answer.
	ErrNoEngine = daggerenv.ErrNoEngine
	// ErrBadBinary: the orkpipe binary cannot run in a scratch linux/amd64 container.
	ErrBadBinary = daggerenv.ErrBadBinary
)

// CheckBinary is daggerenv.CheckBinary.
func CheckBinary(path string) error { return daggerenv.CheckBinary(path) }

// SelfBinary is daggerenv.SelfBinary.
func SelfBinary() (string, error) { return daggerenv.SelfBinary() }

// ModuleRoot is daggerenv.ModuleRoot.
func ModuleRoot(ctx context.Context, dir string) (string, error) {
	return daggerenv.ModuleRoot(ctx, dir)
}

// BuildBinary is daggerenv.BuildBinary.
func BuildBinary(ctx context.Context, root, out string) error {
	return daggerenv.BuildBinary(ctx, root, out)
}
