package main

import (
	"context"
	"fmt"
	"io"

	"github.com/zeebo/blake3"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// packOwnedSet returns the tensors of f that the orkpack at path owns: one name per entry, MoE expert
// entries ("<name>#<e>") folded into their tensor. Every owned name must be a tensor of f: a pack built
// from another model is an error, not an empty intersection. With checkSource (f is the full source
// model, not a stub), every whole-tensor entry's recorded source digest must also equal the BLAKE3 of
// that tensor's bytes in f, so a pack built from a different model with the same tensor names is refused.
func packOwnedSet(ctx context.Context, f *gguf.File, path string, checkSource bool) (gguf.NameSet, error) {
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
		t, err := f.Tensor(name)
		if err != nil {
			return nil, fmt.Errorf("pack %s owns %q, which is not a tensor of %s: the pack was built from another model", path, name, f.Path)
		}
		if checkSource && name == e.Name {
			h := blake3.New()
			if _, err := io.Copy(h, f.Section(t)); err != nil {
				return nil, fmt.Errorf("hashing tensor %q of %s: %w", name, f.Path, err)
			}
			if got := pack.Digest(h.Sum(nil)); got != e.Source {
				return nil, fmt.Errorf("pack %s entry %q was built from different bytes than tensor %q of %s (source digest %x, tensor %x): the pack was built from another model",
					path, e.Name, name, f.Path, e.Source[:8], got[:8])
			}
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("pack %s has no entries", path)
	}
	return gguf.NewNameSet(names...), nil
}
