package stages

import (
	"context"
	"fmt"

	"orkpipe/ork/quant"
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

// RTNTileMemory is the declared peak memory of an rtn-tile node: FinalizeMemory's RTN figure plus
// the tiled codes, at most one byte per code with tile padding. It over-counts: rtn-tile's codes go
// straight into the tiled buffer (quant.RTNStreamTo), so the row-major N·KP codes FinalizeMemory
// counts are never allocated; kept until a child-process VmHWM measure of rtn-tile backs a tighter
// figure.
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

// runRTNTile quantizes the weight with its codes tiled into place as each worker's rows come out
// (tiledCodes), so the row-major codes are never held whole.
func runRTNTile(ctx context.Context, p RTNTileParams, req Request) error {
	var tc *tiledCodes
	q, err := finalizeWeight(ctx, p.Finalize, req, func(m QWeightMeta) (quant.CodeSink, error) {
		var err error
		tc, err = newTiledCodes(m, p.Nibbles)
		if err != nil {
			return nil, err
		}
		return tc.sink, nil
	})
	if tc != nil {
		defer tc.release()
	}
	if err != nil {
		return err
	}
	if tc == nil { // a weight the quantizer did not stream (F16)
		return writeTiledEntry(ctx, req.Output("entry"), q, p.Nibbles)
	}
	return tc.write(ctx, req.Output("entry"), q)
}
