package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/board"
)

// TestBuildRefusesUnfitPack: plan and build refuse a 27B-shaped recipe whose pack cannot fit a
// two-domain board profile with a usage error (exit 2) that carries the numbers; build emits no event
// (no node ran) and stores nothing.
func TestBuildRefusesUnfitPack(t *testing.T) {
	dir := t.TempDir()
	p := board.RK3588()
	p.Name, p.MaxDomains, p.DomainCeiling, p.Headroom = "tiny", 2, 100<<20, 1<<20
	pj, _ := json.Marshal(p)
	prof := filepath.Join(dir, "tiny.json")
	os.WriteFile(prof, pj, 0o644)
	recipe := filepath.Join(dir, "big.yaml")
	os.WriteFile(recipe, []byte(`name: big
source:
  synth: {layers: 1, n_embd: 5120, n_ff: 17408, n_head: 40, n_head_kv: 8, vocab: 1024, ctx: 4096, type: BF16, seed: 1}
board: `+prof+`
schemes:
  - {match: 'blk\.\d+\..*\.weight', method: rtn, dtype: I8, group: 0}
`), 0o644)
	cache := filepath.Join(dir, "cache")
	want := []string{`entry "blk.0.ffn_gate.weight" needs 170.00 MiB resident, more than one tiny domain holds (99.00 MiB)`,
		"and 1 more entry does too; needs 5 domains, tiny has 2; 545.00 MiB resident", "largest entries: blk.0.ffn_gate.weight 170.00 MiB"}
	for _, args := range [][]string{{"plan", recipe}, {"--json", "build", recipe, "-o", filepath.Join(dir, "out")}} {
		stdout, stderr, code := demoCLI(t, append([]string{"--cache", cache}, args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %s)", args, code, stderr)
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr does not say %q:\n%s", args, w, stderr)
			}
		}
		if stdout != "" {
			t.Errorf("%v: printed %q, want nothing (no node planned or run)", args, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Errorf("output directory: %v, want none", err)
	}
}
