package verify

import (
	"fmt"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// EntryFitsTensor checks that pack entry e can stand for tensor t of a model (its stub or its source):
// t is two-dimensional [K, N], or for an expert entry "<name>#<x>" three-dimensional [K, N, n_expert]
// with more than x experts, N is the entry's, and K is the entry's, or at most it when the entry is
// rotated (its K padded to whole Hadamard blocks) — the rule the offline emulation applies
// (model.NewPackSource). A pack whose names match a model's but whose shapes do not was built for
// another model.
func EntryFitsTensor(e pack.Entry, t gguf.TensorInfo) error {
	_, expert, isExpert := pack.SplitExpert(e.Name)
	dims := 2
	if isExpert {
		dims = 3
	}
	bad := func(want string) error {
		return fmt.Errorf("pack entry %q is %d x %d (K x N%s), tensor %q is %v: want %s", e.Name, e.K, e.N, rotatedText(e), t.Name, t.Shape, want)
	}
	switch {
	case len(t.Shape) != dims && isExpert:
		return bad(fmt.Sprintf("an expert tensor [K N n_expert] with more than %d experts", expert))
	case len(t.Shape) != dims:
		return bad("a matrix [K N]")
	case isExpert && int64(expert) >= t.Shape[2]:
		return bad(fmt.Sprintf("more than %d experts", expert))
	case t.Shape[1] != int64(e.N):
		return bad("the entry's N")
	case e.Rotation.Kind == pack.RotNone && t.Shape[0] != int64(e.K):
		return bad("the entry's K")
	case t.Shape[0] > int64(e.K):
		return bad("K at most the rotated entry's")
	}
	return nil
}

func rotatedText(e pack.Entry) string {
	if e.Rotation.Kind == pack.RotNone {
		return ""
	}
	return ", K padded for its rotation"
}
