package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// planResidency returns the residency plan of a planned build (nil when it plans none) and how it was
// obtained: the residency node's output when cached; else, when its inputs are (the routing statistics of
// an earlier build), the plan computed now by running the stage on them into a temporary directory
// (nothing is stored); else nil with the reason it is pending.
func planResidency(ctx context.Context, opts *globalOptions, nodes []engine.NodeStatus) (*stages.ResidencyFile, string, error) {
	var n *engine.NodeStatus
	for i := range nodes {
		if nodes[i].Stage == "residency" {
			n = &nodes[i]
		}
	}
	switch {
	case n == nil:
		return nil, "", nil
	case n.Remote:
		return nil, "pending: the residency node is in the remote cache, and plan downloads no output (the build does)", nil
	case n.Cached:
		f, err := stages.ReadResidency(n.Files["residency.json"])
		return f, "cached", err
	case n.Material == nil:
		return nil, "pending: the routing statistics come from calibration (node routing); run orkpipe build, then plan again", nil
	}
	byDigest := map[artifacts.Digest]stages.File{}
	for _, m := range nodes {
		for _, f := range m.Files {
			byDigest[f.Digest] = f
		}
	}
	inputs := map[string]stages.File{}
	for name, d := range n.Material.Inputs {
		f, ok := byDigest[d]
		if !ok {
			return nil, fmt.Sprintf("pending: input %s of node %s is not a cached output", name, n.ID), nil
		}
		inputs[name] = f
	}
	dir, err := os.MkdirTemp("", "orkpipe-plan-residency-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	if _, err := stages.Execute(ctx, *n.Material, inputs, nil, dir, opts.logger); err != nil {
		return nil, "", fmt.Errorf("node %s: %w", n.ID, err)
	}
	f, err := stages.ReadResidency(stages.File{Path: filepath.Join(dir, "residency.json")})
	return f, "computed now from the cached routing statistics (not stored)", err
}

// writePlanResidency prints the expected hit rate of a residency plan and its curve.
func writePlanResidency(w io.Writer, r *stages.ResidencyFile, how string) {
	if r == nil {
		if how != "" {
			fmt.Fprintf(w, "residency: expected hit rate %s\n", how)
		}
		return
	}
	fmt.Fprintf(w, "residency (%s): budget %s = %s beside %s of dense weights in %d domain(s) of %s: %d of %d experts hot, expected hit rate %.4f (%d of %d calibration lookups)\n",
		how, r.Budget, mibText(r.BudgetBytes), mibText(r.DenseBytes), r.Domains, r.Board, r.Hot, r.Experts, r.HitRate, r.HotLookups, r.Lookups)
	fmt.Fprintf(w, "hit rate vs budget (of %s of experts):", mibText(r.ExpertBytes))
	for _, c := range r.Curve {
		fmt.Fprintf(w, " %.0f%% %.4f", 100*c.Fraction, c.HitRate)
	}
	fmt.Fprintln(w)
}
