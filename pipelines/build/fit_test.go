package build_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/recipe"
)

// writeProfile writes p as a JSON board profile file and returns its path.
func writeProfile(t *testing.T, p board.Profile) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), p.Name+".json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// tinyBoard is rk3588 with two domains of 99 MiB.
func tinyBoard() board.Profile {
	p := board.RK3588()
	p.Name, p.MaxDomains = "tiny", 2
	p.DomainCeiling, p.Headroom = 100<<20, 1<<20
	return p
}

// TestBoardFitAtPlan: a 27B-shaped recipe (64 layers, n_embd 5120, n_ff 17408, every block weight I8)
// on a two-domain profile is refused when the graph is planned, before any node exists, with the
// numbers: the entry larger than a domain, the domains needed and available, the largest entries.
func TestBoardFitAtPlan(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.yaml")
	body := fmt.Sprintf(`name: big
source:
  synth: {layers: 64, n_embd: 5120, n_ff: 17408, n_head: 40, n_head_kv: 8, vocab: 1024, ctx: 4096, type: BF16, seed: 1}
board: %s
schemes:
  - {match: 'blk\.\d+\..*\.weight', method: rtn, dtype: I8, group: 0}
`, writeProfile(t, tinyBoard()))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := recipe.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := build.New(rec, build.WithMemoryBudget(64<<30))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tg.Graph(context.Background())
	var fe *board.FitError
	if g != nil || !errors.Is(err, build.ErrPlan) || !errors.As(err, &fe) {
		t.Fatalf("Graph = %v, %v; want no graph and an ErrPlan with a *board.FitError", g, err)
	}
	// attn_q/attn_output: 5120x5120 int8 = 25 MiB + its full-K companion; attn_k/v: 5120x1024, 5 + 5 MiB;
	// ffn_gate/up: 5120x17408, 85 + 85 MiB; ffn_down: K 17408 > 10752, no companion, 85 MiB.
	const mib = 1 << 20
	perLayer := int64(2*50+2*10+2*170+85) * mib
	if fe.Board != "tiny" || fe.Available != 2 || fe.Capacity != 99*mib || fe.Total != 64*perLayer || len(fe.Oversized) != 128 {
		t.Errorf("FitError %+v: want board tiny, 2 domains available of 99 MiB, %d bytes in all, 128 oversized entries", *fe, 64*perLayer)
	}
	if fe.Needed < 64*5 {
		t.Errorf("needs %d domains, want at least %d", fe.Needed, 64*5)
	}
	for _, want := range []string{`entry "blk.0.ffn_gate.weight" needs 170.00 MiB resident, more than one tiny domain holds (99.00 MiB)`,
		"and 127 more entries do too", fmt.Sprintf("needs %d domains, tiny has 2", fe.Needed), "largest entries: blk.0.ffn_gate.weight 170.00 MiB, blk.0.ffn_up.weight 170.00 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}

	// The same recipe with fewer, int4 layers on rk3588 fits.
	rec, err = recipe.Load(path, "board=rk3588", "source.synth.layers=2", "schemes.0.dtype=I4_NATIVE")
	if err != nil {
		t.Fatal(err)
	}
	tg, _ = build.New(rec, build.WithMemoryBudget(64<<30))
	if _, err := tg.Graph(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestPlannedFitIsWhatCommits: the plan checked before anything runs is the plan the committed pack
// stores (entries, resident bytes, domains), and a promotion that would make the pack unfit is
// skipped while one that keeps it fitting is taken.
func TestPlannedFitIsWhatCommits(t *testing.T) {
	r := newRig(t)
	path := writeRecipe(t, "oneshot")
	out := filepath.Join(t.TempDir(), "out")
	if _, _, err := r.build(t, path, out); err != nil {
		t.Fatal(err)
	}
	rec, err := recipe.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := build.New(rec, build.WithMemoryBudget(2<<30))
	planned, err := tg.BoardPlan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pr, err := pack.Open(context.Background(), filepath.Join(out, "tiny.orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	es := pr.Entries()
	pr.Close()
	if len(es) != len(planned.Resident) || planned.Total != pr.Board().Resident || planned.Domains() != pr.Board().Domains {
		t.Fatalf("planned %d entries, %d bytes, %d domains; pack has %d, %d, %d", len(planned.Resident), planned.Total, planned.Domains(),
			len(es), pr.Board().Resident, pr.Board().Domains)
	}
	for i, e := range es {
		if e.ResidentBytes != planned.Resident[i] || e.Domain != planned.Domain[i] {
			t.Errorf("%s: planned %d bytes in domain %d, committed %d in %d", e.Name, planned.Resident[i], planned.Domain[i], e.ResidentBytes, e.Domain)
		}
	}

	// One domain exactly as large as the base pack: promoting ffn_gate (int4 -> int8 resident, 4 KiB ->
	// 8 KiB) would overflow it, promoting attn_q (64x64: one page either way) would not.
	exact := board.RK3588()
	exact.Name, exact.MaxDomains, exact.Headroom, exact.DomainCeiling = "exact", 1, 0, planned.Total
	prof := writeProfile(t, exact)
	out2 := filepath.Join(t.TempDir(), "out")
	_, _, err = r.build(t, path, out2, "board="+prof, `promote.match=blk\.\d+\.(attn_q|ffn_gate)\.weight`, "promote.to=I8_ROT", "promote.budget_mib=64")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, w := range readReport(t, out2).Weights {
		got[w.Name] = w.DType
	}
	for l := range 2 {
		q, g := fmt.Sprintf("blk.%d.attn_q.weight", l), fmt.Sprintf("blk.%d.ffn_gate.weight", l)
		if got[q] != "I8_ROT" || got[g] != "I4_NATIVE" {
			t.Errorf("layer %d: attn_q %s, ffn_gate %s; want attn_q promoted (I8_ROT), ffn_gate kept (I4_NATIVE): it would not fit", l, got[q], got[g])
		}
	}
}
