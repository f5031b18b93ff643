package stages

import (
	"context"
	"fmt"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// EmitStubParams are the parameters of "emit-stub" (none: the owned set is the pack's entries).
type EmitStubParams struct{}

func init() {
	Register(Define("emit-stub", 1, func(EmitStubParams) (Spec, error) {
		return Spec{Inputs: []string{"model", "pack"}, Outputs: []string{"stub.gguf"}, PeakMemory: 96 << 20}, nil
	}, runEmitStub))
}

// checkPackCovers checks a pack's entries against the source model they were built from: an expert
// entry "<name>#<e>" must name a 3-D tensor [K, N, n_expert] of src with e < n_expert and N rows
// per expert, and an expert tensor the pack owns must have an entry for every one of its n_expert
// experts: the stub holes the whole tensor, so a missing expert would lose its weights.
func checkPackCovers(r *pack.Reader, src *gguf.File) error {
	experts := map[string]map[int]bool{}
	for _, e := range r.Entries() {
		base, x, ok := pack.SplitExpert(e.Name)
		if !ok {
			continue
		}
		t, err := src.Tensor(base)
		if err != nil {
			return fmt.Errorf("pack entry %s: %w", e.Name, err)
		}
		if len(t.Shape) != 3 || int64(x) >= t.Shape[2] || int64(e.N) != t.Shape[1] {
			return fmt.Errorf("pack entry %s (N %d): %s tensor %s has shape %v, want [K, %d, n_expert > %d]", e.Name, e.N, src.Path, base, t.Shape, e.N, x)
		}
		if experts[base] == nil {
			experts[base] = map[int]bool{}
		}
		experts[base][x] = true
	}
	for base, got := range experts {
		t, _ := src.Tensor(base)
		var missing []int
		for x := 0; x < int(t.Shape[2]); x++ {
			if !got[x] {
				missing = append(missing, x)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("pack owns MoE tensor %s but has no entry for expert(s) %v of its %d: the stub would lose their weights", base, missing, t.Shape[2])
		}
	}
	return nil
}

func runEmitStub(ctx context.Context, _ EmitStubParams, req Request) error {
	r, err := pack.Open(ctx, req.Inputs["pack"].Path)
	if err != nil {
		return err
	}
	defer r.Close()
	src, err := gguf.Open(ctx, req.Inputs["model"].Path)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := checkPackCovers(r, src); err != nil {
		return fmt.Errorf("pack %s: %w", req.Inputs["pack"].Path, err)
	}
	res, err := gguf.EmitStub(ctx, src, gguf.NewNameSet(pack.OwnedTensors(r.Entries())...), req.Output("stub.gguf"))
	if err != nil {
		return fmt.Errorf("emitting the stub of %s: %w", req.Inputs["model"].Path, err)
	}
	req.Logger.Debug("stub written", "owned", len(res.Owned), "owned_bytes", res.OwnedBytes, "copied_bytes", res.CopiedBytes)
	return nil
}
