package engine

import "context"

// Target is something that plans into a graph: the built-in demo today, a recipe file later.
// Name identifies it across builds: pins and the build history (explain) are kept per name.
type Target interface {
	Name() string
	Graph(ctx context.Context) (*Graph, error)
}
