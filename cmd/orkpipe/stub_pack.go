package main

import (
	"context"
	"fmt"
	"io"

	"github.com/zeebo/blake3"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/verify"
)

// packOwnedSet returns the tensors of f that the orkpack at path owns: one name per entry, MoE expert
// entries ("<name>#<e>") folded into their tensor. Every owned name must be a tensor of f: a pack built
// from another model is an error, not an empty intersection. With checkSource (f is the full source
// model, not a stub), every entry's recorded source digest must also equal the BLAKE3 of its bytes in
// f (the whole tensor, or for an expert entry that expert's rows), so a pack built from a different
// model with the same tensor names is refused.
func packOwnedSet(ctx context.Context, f *gguf.File, path string, checkSource bool) (gguf.NameSet, error) {
	r, err := pack.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	es := r.Entries()
	if len(es) == 0 {
		return nil, fmt.Errorf("pack %s has no entries", path)
	}
	owned := pack.OwnedTensors(es)
	for _, name := range owned {
		if _, err := f.Tensor(name); err != nil {
			return nil, fmt.Errorf("pack %s owns %q, which is not a tensor of %s: the pack was built from another model", path, name, f.Path)
		}
	}
	for _, e := range es {
		t, _ := f.Tensor(e.Tensor())
		if err := verify.EntryFitsTensor(e, t); err != nil {
			return nil, fmt.Errorf("pack %s, %s: %w: the pack was built from another model", path, f.Path, err)
		}
	}
	if checkSource {
		for _, e := range es {
			t, _ := f.Tensor(e.Tensor())
			if err := checkEntrySource(f, t, path, e); err != nil {
				return nil, err
			}
		}
	}
	return gguf.NewNameSet(owned...), nil
}

// checkEntrySource compares the source digest recorded in pack entry e with the BLAKE3 of the bytes it
// was built from in f: all of tensor t, or for expert entry "<name>#<x>" of a 3-D expert tensor
// [K, N, n_expert] its N rows starting at row x·N (what the finalize stage hashes).
func checkEntrySource(f *gguf.File, t gguf.TensorInfo, path string, e pack.Entry) error {
	sec := f.Section(t)
	if _, expert, isExpert := pack.SplitExpert(e.Name); isExpert {
		if len(t.Shape) != 3 || int64(expert) >= t.Shape[2] {
			return fmt.Errorf("pack %s entry %q: tensor %q of %s has shape %v, want an expert tensor [K N n_expert] with more than %d experts",
				path, e.Name, t.Name, f.Path, t.Shape, expert)
		}
		start, _ := f.DataRange(t)
		rows := t.Shape[1]
		sec = io.NewSectionReader(f.ReaderAt(), start+int64(expert)*rows*t.RowBytes(), rows*t.RowBytes())
	}
	h := blake3.New()
	if _, err := io.Copy(h, sec); err != nil {
		return fmt.Errorf("hashing tensor %q of %s for pack entry %q: %w", t.Name, f.Path, e.Name, err)
	}
	if got := pack.Digest(h.Sum(nil)); got != e.Source {
		return fmt.Errorf("pack %s entry %q was built from different bytes than tensor %q of %s (source digest %x, tensor %x): the pack was built from another model",
			path, e.Name, t.Name, f.Path, e.Source[:8], got[:8])
	}
	return nil
}
