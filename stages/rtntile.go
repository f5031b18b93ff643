package stages

import (
	"context"
	"fmt"
)

// RTNTileParams are the parameters of "rtn-tile": one RTN weight finalized and tiled in one node,
// for a weight whose finalized form nothing but its tile reads (no activation clip search after it,
// no propagate reading it). The output "entry" is byte for byte the tiled entry that "finalize"
// with Finalize and then "tile" with Nibbles would write (TestRTNTileMatchesFinalizeThenTile), so
// the pack does not change; what changes is the cache: a new nibble order re-runs the quantization
// too, which costs RTN seconds, while GPTQ (hours) keeps its separate finalize and tile nodes.
type RTNTileParams struct {
	Finalize FinalizeParams `json:"finalize"`
	Nibbles  string         `json:"nibbles"` // int4 nibble order: low-first | high-first
}

// RTNTileMemory is the declared peak memory of an rtn-tile node: the RTN finalize's (codes, scales,
// the workers' rows) plus the tiled codes, at most one byte per code with tile padding.
func RTNTileMemory(p FinalizeParams) int64 {
	n, kp := int64(p.N), int64(p.KP())
	return FinalizeMemory(p) + (n+64)*(kp+32)
}

func init() {
	Register(Define("rtn-tile", 2, func(p RTNTileParams) (Spec, error) {
		if err := p.Finalize.validate(); err != nil {
			return Spec{}, err
		}
		if p.Finalize.Method != "rtn" {
			return Spec{}, fmt.Errorf("finalize.method %q: rtn-tile quantizes by rtn only (gptq and F16 weights use finalize and tile)", p.Finalize.Method)
		}
		if p.Nibbles != "low-first" && p.Nibbles != "high-first" {
			return Spec{}, fmt.Errorf("nibbles %q: want low-first or high-first", p.Nibbles)
		}
		s := Spec{Inputs: []string{"model"}, Outputs: []string{"entry"}, PeakMemory: RTNTileMemory(p.Finalize)}
		if p.Finalize.Importance == "imatrix" {
			s.Inputs = append(s.Inputs, "imatrix")
		}
		return s, nil
	}, runRTNTile))
}

func runRTNTile(ctx context.Context, p RTNTileParams, req Request) error {
	q, err := finalizeWeight(ctx, p.Finalize, req)
	if err != nil {
		return err
	}
	return writeTiledEntry(ctx, req.Output("entry"), q, p.Nibbles)
}
