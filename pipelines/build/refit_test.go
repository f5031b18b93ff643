package build_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/quant"
	"orkpipe/stages"
)

// TestScaleRefitBuild: scale_refit reaches the finalize parameters of the weights its scheme matches
// (and only theirs) with the refit's steps and arithmetic version, the build runs, and the pack
// differs from the same recipe without it.
func TestScaleRefitBuild(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "sequential")
	sets := []string{"schemes.0.scale_refit=2"}
	outR, outP := filepath.Join(t.TempDir(), "r"), filepath.Join(t.TempDir(), "p")
	if _, _, err := r.build(t, path, outR, sets...); err != nil {
		t.Fatal(err)
	}
	st, err := planStatus(t, r, path, sets...) // after the build: the nodes' key material is known
	if err != nil {
		t.Fatal(err)
	}
	steps := fmt.Sprintf(`"refit_steps":%d`, quant.DefaultRefitSteps)
	version := fmt.Sprintf(`"refit_version":%d`, quant.RefitVersion)
	if m := st["finalize:blk.0.ffn_down.weight"].Material; m == nil || !strings.Contains(string(m.Params), `"scale_refit":2`) ||
		!strings.Contains(string(m.Params), steps) || !strings.Contains(string(m.Params), version) {
		t.Fatalf("finalize:blk.0.ffn_down.weight: params %s, want scale_refit 2, %s and %s (key material)", paramsOf(m), steps, version)
	}
	if m := st["finalize:blk.0.attn_q.weight"].Material; m == nil || strings.Contains(string(m.Params), "refit") {
		t.Fatalf("finalize:blk.0.attn_q.weight (another scheme): params %s, want no scale_refit, refit_steps or refit_version", paramsOf(m))
	}
	if _, _, err := r.build(t, path, outP); err != nil {
		t.Fatal(err)
	}
	if a, b := readReport(t, outR), readReport(t, outP); a.Pack.Digest == b.Pack.Digest {
		t.Errorf("scale_refit left the pack as plain GPTQ's (%s)", a.Pack.Digest)
	}
}

// paramsOf returns a node's key-material parameters as text ("<no key material>" for nil).
func paramsOf(m *stages.KeyMaterial) string {
	if m == nil {
		return "<no key material>"
	}
	return string(m.Params)
}

// TestRotationSearchBuild: rotation_search reaches the finalize parameters of its scheme's weights
// (and only theirs) with the scores' arithmetic version, and the build runs.
func TestRotationSearchBuild(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "oneshot")
	sets := []string{"schemes.1.rotation_search=4"}
	if _, _, err := r.build(t, path, filepath.Join(t.TempDir(), "s"), sets...); err != nil {
		t.Fatal(err)
	}
	st, err := planStatus(t, r, path, sets...)
	if err != nil {
		t.Fatal(err)
	}
	version := fmt.Sprintf(`"search_version":%d`, quant.SearchVersion)
	if m := st["finalize:blk.1.attn_q.weight"].Material; m == nil || !strings.Contains(string(m.Params), `"rotation_seeds":4`) || !strings.Contains(string(m.Params), version) {
		t.Fatalf("finalize:blk.1.attn_q.weight: params %s, want rotation_seeds 4 and %s (key material)", paramsOf(m), version)
	}
	if m := st["finalize:blk.1.ffn_down.weight"].Material; m == nil || strings.Contains(string(m.Params), "rotation_seeds") || strings.Contains(string(m.Params), "search_version") {
		t.Fatalf("finalize:blk.1.ffn_down.weight (another scheme): params %s, want no rotation_seeds or search_version", paramsOf(m))
	}
}
