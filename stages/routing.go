package stages

import (
	"context"
	"fmt"
	"os"

	"orkpipe/ork/calib"
)

// RoutingOutput is the calibrate output of an MoE model's window: how the window's MoE blocks routed the
// calibration tokens (calib.Routing in its routing.json form).
const RoutingOutput = "routing"

func writeRouting(path string, r *calib.Routing) error {
	if r == nil {
		return fmt.Errorf("routing %s: the forward pass recorded no routing (the model has no MoE block?)", path)
	}
	b, err := r.Marshal()
	if err != nil {
		return fmt.Errorf("routing %s: %w", path, err)
	}
	return os.WriteFile(path, b, 0o644)
}

// readRouting reads and validates a routing.json input.
func readRouting(f File) (calib.Routing, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return calib.Routing{}, err
	}
	return calib.ParseRouting(b, f.Path)
}

// RoutingParams are the parameters of "routing": the routing outputs of Windows calibrate windows, bound
// as inputs "w.0", "w.1", ... in window order, merged into "routing.json" (every MoE block once).
type RoutingParams struct {
	Windows int `json:"windows"`
}

func init() {
	Register(Define("routing", 1, func(p RoutingParams) (Spec, error) {
		if p.Windows < 1 || p.Windows > 1<<16 {
			return Spec{}, fmt.Errorf("windows %d: want 1..65536", p.Windows)
		}
		s := Spec{Outputs: []string{"routing.json"}, PeakMemory: 64<<20 + int64(p.Windows)<<20}
		for i := 0; i < p.Windows; i++ {
			s.Inputs = append(s.Inputs, fmt.Sprintf("w.%d", i))
		}
		return s, nil
	}, runRouting))
}

func runRouting(ctx context.Context, p RoutingParams, req Request) error {
	parts := make([]calib.Routing, p.Windows)
	for i := range parts {
		r, err := readRouting(req.Inputs[fmt.Sprintf("w.%d", i)])
		if err != nil {
			return err
		}
		parts[i] = r
	}
	r, err := calib.MergeRouting(parts...)
	if err != nil {
		return err
	}
	if len(r.Layers) == 0 {
		return fmt.Errorf("routing: the %d windows hold no MoE block", p.Windows)
	}
	return writeRouting(req.Output("routing.json"), &r)
}
