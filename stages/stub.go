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

// packOwned returns the source tensors a pack owns (an expert entry "<name>#<e>" owns <name>).
func packOwned(r *pack.Reader) gguf.NameSet {
	owned := gguf.NameSet{}
	for _, e := range r.Entries() {
		name := e.Name
		if base, _, ok := pack.SplitExpert(e.Name); ok {
			name = base
		}
		owned[name] = struct{}{}
	}
	return owned
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
	res, err := gguf.EmitStub(ctx, src, packOwned(r), req.Output("stub.gguf"))
	if err != nil {
		return fmt.Errorf("emitting the stub of %s: %w", req.Inputs["model"].Path, err)
	}
	req.Logger.Debug("stub written", "owned", len(res.Owned), "owned_bytes", res.OwnedBytes, "copied_bytes", res.CopiedBytes)
	return nil
}
