package stages_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"orkpipe/ork/quant"
	"orkpipe/stages"
)

// TestFinalizeRefitKeyMaterial: a refitting finalize binds only with this binary's refit steps
// bound and arithmetic version (quant.RefitVersion), and a finalize without the refit only without
// them: a node keyed with another refit arithmetic is refused, never run as this one.
func TestFinalizeRefitKeyMaterial(t *testing.T) {
	const base = `"tensor":"blk.0.ffn_down.weight","method":"gptq","dtype":"I4_ROT_A8","group":32,"rotation":"hadamard","act_bits":8,"clip_grid":null,"damp":0.01,"act_order":false,"seed":5,"n":64,"k":96`
	k, err := stages.Lookup("finalize")
	if err != nil {
		t.Fatal(err)
	}
	own := fmt.Sprintf(`,"scale_refit":2,"refit_steps":%d,"refit_version":%d`, quant.DefaultRefitSteps, quant.RefitVersion)
	if _, err := k.Bind([]byte(`{` + base + own + `}`)); err != nil {
		t.Fatalf("this binary's refit: %v", err)
	}
	for _, extra := range []string{
		fmt.Sprintf(`,"scale_refit":2,"refit_steps":%d`, quant.DefaultRefitSteps),
		fmt.Sprintf(`,"scale_refit":2,"refit_steps":%d,"refit_version":%d`, quant.DefaultRefitSteps, quant.RefitVersion-1),
		fmt.Sprintf(`,"refit_version":%d`, quant.RefitVersion),
	} {
		if _, err := k.Bind([]byte(`{` + base + extra + `}`)); !errors.Is(err, stages.ErrBadParams) || !strings.Contains(err.Error(), "refit_version") {
			t.Errorf("Bind(...%s) = %v, want ErrBadParams naming refit_version", extra, err)
		}
	}
}

// TestFinalizeSearchKeyMaterial: a finalize with a rotation search binds only with this binary's
// scoring arithmetic (quant.SearchVersion), and one without the search only without it.
func TestFinalizeSearchKeyMaterial(t *testing.T) {
	const base = `"tensor":"blk.0.attn_q.weight","method":"gptq","dtype":"I4_ROT_A8","group":32,"rotation":"hadamard","act_bits":8,"clip_grid":null,"damp":0.01,"act_order":false,"seed":5,"n":64,"k":96`
	k, err := stages.Lookup("finalize")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Bind([]byte(`{` + base + fmt.Sprintf(`,"rotation_seeds":8,"search_version":%d`, quant.SearchVersion) + `}`)); err != nil {
		t.Fatalf("this binary's search: %v", err)
	}
	for _, extra := range []string{
		`,"rotation_seeds":8`,
		fmt.Sprintf(`,"rotation_seeds":8,"search_version":%d`, quant.SearchVersion-1),
		fmt.Sprintf(`,"search_version":%d`, quant.SearchVersion),
	} {
		if _, err := k.Bind([]byte(`{` + base + extra + `}`)); !errors.Is(err, stages.ErrBadParams) || !strings.Contains(err.Error(), "search_version") {
			t.Errorf("Bind(...%s) = %v, want ErrBadParams naming search_version", extra, err)
		}
	}
}
