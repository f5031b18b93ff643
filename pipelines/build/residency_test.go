package build_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/fixtures"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/calib"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/build"
	"orkpipe/stages"
)

// skewedMoE is the synthetic MoE of the residency tests: 2 blocks of 16 experts (n_ff 96, top-2) whose
// routers are skewed on purpose (router_skew 1), F32.
var skewedMoE = stages.SynthParams{Layers: 2, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, Vocab: 360, Ctx: 64, Type: "F32", Seed: 23,
	Experts: 16, ExpertsUsed: 2, RouterSkew: 1}

// residencyRecipe calibrates skewedMoE in one-shot windows of one layer on stories-calib.txt (16
// sequences of 64 tokens), packs the experts int8 and the attention int4 by RTN, screens on the
// held-out tinystories_sample.txt and plans residency under budget on one rk3588 domain.
func residencyRecipe(t *testing.T, budget string) string {
	t.Helper()
	body := fmt.Sprintf(`name: skewed-moe
source:
  synth: {layers: 2, n_embd: 64, n_ff: 96, n_head: 4, n_head_kv: 2, vocab: 360, ctx: 64, type: F32, seed: 23, n_expert: 16, n_expert_used: 2, router_skew: 1}
calibration: {corpus: %s, sequences: 16, ctx: 64, mode: oneshot, window: 1}
schemes:
  - {match: 'blk\.\d+\.ffn_\w+_exps\.weight', method: rtn, dtype: I8}
  - {match: 'blk\.\d+\.attn_\w+\.weight', method: rtn, dtype: I4_NATIVE}
screen: {text: %s, ctx: 64}
residency: {budget: %q}
`, testfiles.Path(t, "stories-calib.txt"), testfiles.Path(t, "tinystories_sample.txt"), budget)
	p := filepath.Join(t.TempDir(), "skewed-moe.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// expertRows counts, with a plain model.ExpertObserver, the rows each expert's gate/up input gets: the
// lookups of the forward pass, independently of the routing hook calibration records through.
type expertRows struct {
	embd   int
	counts map[[2]int]int64
}

func (r *expertRows) Observe(int, model.Input, []float32) {}

func (r *expertRows) ObserveExpert(layer int, in model.Input, e int, x []float32) {
	if in == model.InputGateUp {
		r.counts[[2]int{layer, e}] += int64(len(x) / r.embd)
	}
}

// directCount runs the sequences through the model's blocks in calibration's chunks of sequences and
// returns each expert's lookups and their total.
func directCount(t *testing.T, m *model.Model, seqs [][]int32) (map[[2]int]int64, int64) {
	t.Helper()
	ctx := context.Background()
	obs := &expertRows{embd: m.Cfg.NEmbd, counts: map[[2]int]int64{}}
	per := max(1, calib.BatchRows/len(seqs[0]))
	for a := 0; a < len(seqs); a += per {
		var h []float32
		for _, s := range seqs[a:min(a+per, len(seqs))] {
			x, err := m.Embed(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			h = append(h, x...)
		}
		for l := 0; l < m.Cfg.NLayer; l++ {
			ly, err := model.LoadLayer(ctx, &m.Cfg, m.Src, l)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.RunLayerBatch(ctx, ly, h, len(seqs[0]), obs); err != nil {
				t.Fatal(err)
			}
		}
	}
	var total int64
	for _, c := range obs.counts {
		total += c
	}
	return obs.counts, total
}

// TestResidencyBuild is issue 22's acceptance on a skewed synthetic MoE (2 blocks of 16 experts, top-2):
// routing.json's counts equal a direct count of the forward pass over the calibration sequences; the
// plan under 25%, 50% and 100% of the experts' bytes reports hit rates that a replay of that count over
// the pack's hot experts gives exactly, and a held-out text's (the screen text's) out-of-sample hit rate
// that a direct count of its chunks gives exactly; the pack's residency section round-trips; and changing
// only the budget re-runs only the plan and what follows it.
func TestResidencyBuild(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	modelPath := fixtures.Synth(t, skewedMoE)
	m, tok, gf, err := model.OpenGGUF(ctx, modelPath, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	tokens := func(name string) []int32 {
		text, err := os.ReadFile(testfiles.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := tok.Encode(string(text), true, false)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	calSeqs, err := calib.Sequences(tokens("stories-calib.txt"), 16, 64, tok.Vocab().BOS)
	if err != nil {
		t.Fatal(err)
	}
	calCounts, calTotal := directCount(t, m, calSeqs)
	held := tokens("tinystories_sample.txt")
	var heldSeqs [][]int32 // llama-perplexity's chunks: ctx tokens, the first replaced by BOS
	for i := 0; i+64 <= len(held); i += 64 {
		s := slices.Clone(held[i : i+64])
		s[0] = tok.Vocab().BOS
		heldSeqs = append(heldSeqs, s)
	}
	heldCounts, heldTotal := directCount(t, m, heldSeqs)

	var prevOut string
	for i, budget := range []string{"25%", "50%", "100%"} {
		out := filepath.Join(t.TempDir(), "out")
		ran, res, err := r.build(t, residencyRecipe(t, budget), out)
		if err != nil {
			t.Fatalf("budget %s: %v", budget, err)
		}
		if i == 0 {
			if len(ran) != len(res.Nodes) {
				t.Fatalf("first build executed %d of %d nodes", len(ran), len(res.Nodes))
			}
			checkRouting(t, out, calCounts)
		} else {
			// only the plan and what follows it (not emit-stub: the pack owns the same tensors)
			want := []string{"provenance", "report", "residency", "screen", "sha256:skewed-moe.orkpack", "verify-local", "write-orkpack"}
			if !slices.Equal(ran, want) {
				t.Fatalf("budget %s after %s: executed %v, want %v", budget, prevOut, ran, want)
			}
		}
		prevOut = budget
		pr, err := pack.Open(ctx, filepath.Join(out, "skewed-moe.orkpack"))
		if err != nil {
			t.Fatal(err)
		}
		plan, ok := pr.Residency()
		if !ok {
			t.Fatalf("budget %s: the pack has no residency section", budget)
		}
		if err := board.CheckResidency(plan, pr.Entries(), board.RK3588()); err != nil {
			t.Fatal(err)
		}
		var hotBytes int64
		var calHits, heldHits int64
		for _, x := range plan.Experts[:plan.Hot] {
			calHits += calCounts[[2]int{x.Layer, x.Index}]
			heldHits += heldCounts[[2]int{x.Layer, x.Index}]
			for _, name := range x.Entries {
				e, _ := pr.Entry(name)
				hotBytes += e.ResidentBytes
			}
		}
		pr.Close()
		var rep stages.Report
		readJSON(t, filepath.Join(out, "report.json"), &rep)
		s := rep.Residency
		if s == nil || s.HeldOut == nil {
			t.Fatalf("budget %s: report.json has no residency or held-out part", budget)
		}
		if s.HotLookups != calHits || s.Lookups != calTotal || s.HitRate != float64(calHits)/float64(calTotal) {
			t.Errorf("budget %s: report says %d of %d lookups (%v), the direct count replayed over the pack's hot experts %d of %d",
				budget, s.HotLookups, s.Lookups, s.HitRate, calHits, calTotal)
		}
		if h := s.HeldOut; h.HotLookups != heldHits || h.Lookups != heldTotal || h.HitRate != float64(heldHits)/float64(heldTotal) {
			t.Errorf("budget %s: held-out %d of %d (%v), direct count %d of %d", budget, h.HotLookups, h.Lookups, h.HitRate, heldHits, heldTotal)
		}
		if hotBytes != s.HotBytes || hotBytes > s.BudgetBytes || s.BudgetBytes != map[string]int64{"25%": s.ExpertBytes / 4, "50%": s.ExpertBytes / 2, "100%": s.ExpertBytes}[budget] {
			t.Errorf("budget %s: hot %d bytes (report %d), budget %d of %d", budget, hotBytes, s.HotBytes, s.BudgetBytes, s.ExpertBytes)
		}
		t.Logf("budget %s (%d of %d bytes): %d of %d experts hot; hit rate %.4f in sample (%d of %d lookups), %.4f held out (%d of %d, %d tokens)",
			budget, s.BudgetBytes, s.ExpertBytes, s.Hot, s.Experts, s.HitRate, calHits, calTotal, s.HeldOut.HitRate, heldHits, heldTotal, s.HeldOut.Tokens)
		if budget == "25%" {
			var curve []string
			for _, c := range s.Curve {
				curve = append(curve, fmt.Sprintf("%.0f%%:%.4f", 100*c.Fraction, c.HitRate))
			}
			t.Logf("skew: top 10%% of experts serve %.4f of the calibration lookups; hit rate vs budget %s", rep.RoutingStats.Top10Share, strings.Join(curve, " "))
			sum, _ := os.ReadFile(filepath.Join(out, "summary.txt"))
			t.Logf("summary.txt:\n%s", sum)
		}
	}
}

// checkRouting compares the exported routing.json with the direct count.
func checkRouting(t *testing.T, out string, want map[[2]int]int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, build.RoutingExport))
	if err != nil {
		t.Fatal(err)
	}
	r, err := calib.ParseRouting(b, build.RoutingExport)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Layers) != 2 || r.Experts != 16 || r.Used != 2 {
		t.Fatalf("routing.json: %d layers of %d experts top-%d", len(r.Layers), r.Experts, r.Used)
	}
	for _, l := range r.Layers {
		for e, c := range l.Counts {
			if c != want[[2]int{l.Layer, e}] {
				t.Errorf("routing.json layer %d expert %d: %d lookups, the direct count %d", l.Layer, e, c, want[[2]int{l.Layer, e}])
			}
		}
		t.Logf("layer %d: lookups %v (top 10%%: %.4f)", l.Layer, l.Counts, l.TopShare(0.1))
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestResidencyRefusedAtPlan: asking every expert resident in a window that cannot hold them fails when
// the recipe is planned, with the experts, their bytes and the window; budget auto plans what fits.
func TestResidencyRefusedAtPlan(t *testing.T) {
	p := board.RK3588()
	p.Name, p.DomainCeiling, p.Headroom = "small", 512<<10, 0 // 512 KiB domains
	prof := writeProfile(t, p)
	plan := func(budget string) error { return planErr(t, residencyRecipe(t, budget), "board="+prof) }
	err := plan("100%")
	var re *board.ResidencyError
	if !errors.Is(err, build.ErrPlan) || !errors.As(err, &re) || !errors.Is(err, board.ErrDoesNotFit) {
		t.Fatalf("err = %v, want ErrPlan with a *board.ResidencyError", err)
	}
	// 32 experts of 3 int8 slices (96x64 and 64x96: 8 KiB each) = 768 KiB beside 8 int4 attention weights
	// (64x64: 4 KiB each, 32 KiB) in one 512 KiB domain (the whole pack fits the board's 16 domains)
	t.Log(err)
	for _, want := range []string{"every expert resident (32 experts, 96 entries, 768.00 KiB)", "1-domain window of small"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q", want)
		}
	}
	if err := plan("auto"); err != nil {
		t.Fatalf("budget auto: %v", err)
	}
}
