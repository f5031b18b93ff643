package stages

import (
	"context"
	"fmt"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// EmitStubParams are the parameters of "emit-stub": the tensors the pack owns (sorted, each once:
// pack.OwnedTensors of the planned entries; an MoE expert tensor is owned whole), which the stub
// leaves as holes. The stub does not read the pack, so it is written while the weights are still
// being quantized, and a change that keeps the owned set (a group size, a method) does not re-run it;
// verify-local checks the stub against the pack that was built. The stub's sha256 (provenance's) is
// a "sha256" node of its own, as the pack's: sha256 must hash every zero of the holes, tens of GiB
// for a 27B stub, and done here it would hold back verify-local, which needs only the stub (version
// 3; version 2 wrote it here as "sha256.json").
type EmitStubParams struct {
	Owned []string `json:"owned"`
}

func init() {
	Register(Define("emit-stub", 3, func(p EmitStubParams) (Spec, error) {
		if len(p.Owned) == 0 {
			return Spec{}, fmt.Errorf("owned: no tensor")
		}
		for i, name := range p.Owned {
			if name == "" || i > 0 && name <= p.Owned[i-1] {
				return Spec{}, fmt.Errorf("owned: %q at %d: want non-empty names, sorted, each once", name, i)
			}
		}
		return Spec{Inputs: []string{"model"}, Outputs: []string{"stub.gguf"}, PeakMemory: 96 << 20}, nil
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

func runEmitStub(ctx context.Context, p EmitStubParams, req Request) error {
	src, err := gguf.Open(ctx, req.Inputs["model"].Path)
	if err != nil {
		return err
	}
	defer src.Close()
	res, err := gguf.EmitStub(ctx, src, gguf.NewNameSet(p.Owned...), req.Output("stub.gguf"))
	if err != nil {
		return fmt.Errorf("emitting the stub of %s: %w", req.Inputs["model"].Path, err)
	}
	req.Logger.Debug("stub written", "owned", len(res.Owned), "owned_bytes", res.OwnedBytes, "copied_bytes", res.CopiedBytes)
	return nil
}
