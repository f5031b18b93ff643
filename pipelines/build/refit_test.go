package build_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestScaleRefitBuild: scale_refit reaches the finalize parameters of the weights its scheme matches
// (and only theirs), the build runs, and the pack differs from the same recipe without it.
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
	if m := st["finalize:blk.0.ffn_down.weight"].Material; m == nil || !strings.Contains(string(m.Params), `"scale_refit":2`) {
		t.Fatalf("finalize:blk.0.ffn_down.weight: %v, want scale_refit 2 in its params", m)
	}
	if m := st["finalize:blk.0.attn_q.weight"].Material; m == nil || strings.Contains(string(m.Params), "scale_refit") {
		t.Fatalf("finalize:blk.0.attn_q.weight (another scheme): %v, want no scale_refit", m)
	}
	if _, _, err := r.build(t, path, outP); err != nil {
		t.Fatal(err)
	}
	if a, b := readReport(t, outR), readReport(t, outP); a.Pack.Digest == b.Pack.Digest {
		t.Errorf("scale_refit left the pack as plain GPTQ's (%s)", a.Pack.Digest)
	}
}
