package main

import (
	"context"
	"fmt"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// packOwnedSet returns the tensors of f that the orkpack at path owns: one name per entry, MoE expert
// entries ("<name>#<e>") folded into their tensor. Every owned name must be a tensor of f: a pack built
// from another model is an error, not an empty intersection.
func packOwnedSet(ctx context.Context, f *gguf.File, path string) (gguf.NameSet, error) {
	r, err := pack.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var names []string
	for _, e := range r.Entries() {
		name := e.Name
		if base, _, ok := pack.SplitExpert(name); ok {
			name = base
		}
		if _, err := f.Tensor(name); err != nil {
			return nil, fmt.Errorf("pack %s owns %q, which is not a tensor of %s: the pack was built from another model", path, name, f.Path)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("pack %s has no entries", path)
	}
	return gguf.NewNameSet(names...), nil
}
