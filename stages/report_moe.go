package stages

import (
	"bytes"
	"fmt"
	"strings"

	"orkpipe/ork/calib"
	"orkpipe/ork/pack"
)

// topShareFraction is the skew report.json and summary.txt give: the share of the lookups the most-routed
// 10% of experts serve.
const topShareFraction = 0.1

// ReportRouting is the skew of how an MoE model's blocks routed the calibration tokens (the build's
// routing.json; Report.Routing lists each block's counts): Top10Share is the share of all lookups served by
// the most-routed 10% of every (block, expert) pair.
type ReportRouting struct {
	Experts    int     `json:"n_expert"`
	Used       int     `json:"n_expert_used"`
	Tokens     int64   `json:"tokens"`
	Lookups    int64   `json:"lookups"`
	Top10Share float64 `json:"top10_share"`
}

// ReportRoutingLayer is one MoE block's routing: lookups and weight mass per expert.
type ReportRoutingLayer struct {
	Layer      int       `json:"layer"`
	Counts     []int64   `json:"counts"`
	Mass       []float64 `json:"mass"`
	Top10Share float64   `json:"top10_share"`
}

// ReportResidency is the pack's residency plan (residency.json, checked against the pack's section):
// HitRate is the expected share of the calibration lookups served by resident experts, HeldOut the share
// of a held-out text's lookups (the screen text) the same experts serve, Curve the best hit rate at other
// budgets.
type ReportResidency struct {
	Budget        string           `json:"budget"`
	BudgetBytes   int64            `json:"budget_bytes"`
	Domains       int              `json:"domains"`
	WindowBytes   int64            `json:"window_bytes"`
	DenseBytes    int64            `json:"dense_bytes"`
	Experts       int              `json:"experts"`
	ExpertEntries int              `json:"expert_entries"`
	ExpertBytes   int64            `json:"expert_bytes"`
	Hot           int              `json:"hot"`
	HotBytes      int64            `json:"hot_bytes"`
	Lookups       int64            `json:"lookups"`
	HotLookups    int64            `json:"hot_lookups"`
	HitRate       float64          `json:"hit_rate"`
	HeldOut       *ReportHeldOut   `json:"held_out,omitempty"`
	Curve         []ResidencyPoint `json:"curve"`
}

// ReportHeldOut is the plan replayed on a held-out text's routing.
type ReportHeldOut struct {
	Text       string  `json:"text"`
	Tokens     int64   `json:"tokens"`
	Lookups    int64   `json:"lookups"`
	HotLookups int64   `json:"hot_lookups"`
	HitRate    float64 `json:"hit_rate"`
}

func reportRouting(r calib.Routing) (*ReportRouting, []ReportRoutingLayer) {
	out := &ReportRouting{Experts: r.Experts, Used: r.Used, Lookups: r.Lookups(), Top10Share: r.TopShare(topShareFraction)}
	layers := []ReportRoutingLayer{}
	for _, l := range r.Layers {
		out.Tokens = l.Tokens
		layers = append(layers, ReportRoutingLayer{Layer: l.Layer, Counts: l.Counts, Mass: l.Mass, Top10Share: l.TopShare(topShareFraction)})
	}
	return out, layers
}

// reportResidency joins the plan file, the pack's section (which must agree with it) and, when heldOut is
// not nil, replays the pack's hot experts on the held-out routing.
func reportResidency(f *ResidencyFile, r *pack.Reader, heldOut *calib.Routing, text string) (*ReportResidency, error) {
	res, ok := r.Residency()
	if !ok {
		return nil, fmt.Errorf("the pack has no residency section, the build planned one")
	}
	all, hot := res.Lookups()
	if res.Hot != f.Hot || len(res.Experts) != f.Experts || all != f.Lookups || hot != f.HotLookups || res.Budget != f.BudgetBytes {
		return nil, fmt.Errorf("the pack's residency section (%d of %d experts hot, %d of %d lookups, budget %d) differs from residency.json (%d of %d, %d of %d, %d)",
			res.Hot, len(res.Experts), hot, all, res.Budget, f.Hot, f.Experts, f.HotLookups, f.Lookups, f.BudgetBytes)
	}
	out := &ReportResidency{Budget: f.Budget, BudgetBytes: f.BudgetBytes, Domains: f.Domains, WindowBytes: f.WindowBytes, DenseBytes: f.DenseBytes,
		Experts: f.Experts, ExpertEntries: f.ExpertEntries, ExpertBytes: f.ExpertBytes, Hot: f.Hot, HotBytes: f.HotBytes,
		Lookups: all, HotLookups: hot, HitRate: res.HitRate(), Curve: f.Curve}
	if heldOut != nil {
		h := &ReportHeldOut{Text: text, Lookups: heldOut.Lookups()}
		if len(heldOut.Layers) > 0 {
			h.Tokens = heldOut.Layers[0].Tokens
		}
		for _, x := range res.Experts[:res.Hot] {
			h.HotLookups += heldOut.Count(x.Layer, x.Index)
		}
		h.HitRate = rate(h.HotLookups, h.Lookups)
		out.HeldOut = h
	}
	return out, nil
}

// moeSummary is summary.txt's routing and residency lines.
func moeSummary(b *bytes.Buffer, r *Report) {
	if rt := r.RoutingStats; rt != nil {
		var per []string
		for _, l := range r.Routing {
			per = append(per, fmt.Sprintf("%.1f%%", 100*l.Top10Share))
		}
		fmt.Fprintf(b, "routing (calibration, %d tokens): %d experts top-%d in %d MoE blocks; the most-routed 10%% of experts serve %.1f%% of the lookups (per block %s)\n",
			rt.Tokens, rt.Experts, rt.Used, len(r.Routing), 100*rt.Top10Share, strings.Join(per, ", "))
	}
	s := r.Residency
	if s == nil {
		return
	}
	fmt.Fprintf(b, "residency: budget %s = %s beside %s of dense weights in %d domain(s) of %s (%s): %d of %d experts resident at start (%s), expected hit rate %.2f%% on the calibration routing",
		s.Budget, mib(s.BudgetBytes), mib(s.DenseBytes), s.Domains, r.Board, mib(s.WindowBytes), s.Hot, s.Experts, mib(s.HotBytes), 100*s.HitRate)
	if h := s.HeldOut; h != nil {
		fmt.Fprintf(b, ", %.2f%% on %s (held out, %d tokens)", 100*h.HitRate, h.Text, h.Tokens)
	}
	fmt.Fprintf(b, "\nhit rate vs budget (of %s of experts):", mib(s.ExpertBytes))
	for _, c := range s.Curve {
		fmt.Fprintf(b, " %.0f%% %.1f%%", 100*c.Fraction, 100*c.HitRate)
	}
	fmt.Fprintf(b, "\n")
}

// reportMoE fills the routing and residency parts of the report from the bound inputs.
func reportMoE(rep *Report, p ReportParams, r *pack.Reader, req Request) error {
	if p.Routing {
		rt, err := readRouting(req.Inputs["routing"])
		if err != nil {
			return err
		}
		rep.RoutingStats, rep.Routing = reportRouting(rt)
	}
	if !p.Residency {
		return nil
	}
	f, err := ReadResidency(req.Inputs["residency"])
	if err != nil {
		return err
	}
	var held *calib.Routing
	if p.HeldOut != "" {
		h, err := readRouting(req.Inputs["held-out"])
		if err != nil {
			return err
		}
		held = &h
	}
	if rep.Residency, err = reportResidency(f, r, held, p.HeldOut); err != nil {
		return fmt.Errorf("report %s: residency: %w", p.Name, err)
	}
	return nil
}
