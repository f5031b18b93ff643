package stages

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"orkpipe/artifacts"
	"orkpipe/ork/board"
	"orkpipe/ork/calib"
	"orkpipe/ork/pack"
)

// ResidencyParams are the parameters of "residency": which experts of an MoE pack stay resident on the
// board (board.PlanResidency: the exact knapsack of the calibration lookups, input "routing", under Budget,
// board.Budget's text) with the dense entries in Domains domains of the board (a built-in name, or "" with
// input "board", a JSON profile), for the pack's entries as planned: every entry in index order at its
// base tier (write-orkpack skips a promotion that would break the plan). Output "residency.json"
// (ResidencyFile).
type ResidencyParams struct {
	Board   string         `json:"board"`
	Budget  string         `json:"budget"`
	Domains int            `json:"domains"`
	Entries []PlannedEntry `json:"entries"`
}

// PlannedEntry is a pack entry before it exists: what board.ResidentBytes reads.
type PlannedEntry struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	K     int    `json:"k"` // as stored: padded by the rotation
	N     int    `json:"n"`
}

// ResidencyFile is "residency.json": the plan, the numbers behind it and the hit-rate curve.
type ResidencyFile struct {
	Board         string           `json:"board"`
	Domains       int              `json:"domains"`
	WindowBytes   int64            `json:"window_bytes"` // what Domains domains hold
	DenseBytes    int64            `json:"dense_bytes"`  // resident bytes of the entries that are not experts
	Experts       int              `json:"experts"`
	ExpertEntries int              `json:"expert_entries"`
	ExpertBytes   int64            `json:"expert_bytes"` // every expert's resident bytes
	Budget        string           `json:"budget"`       // as asked
	BudgetBytes   int64            `json:"budget_bytes"` // resolved
	Routing       string           `json:"routing"`      // digest of the routing statistics
	Hot           int              `json:"hot"`
	HotBytes      int64            `json:"hot_bytes"`
	Lookups       int64            `json:"lookups"`
	HotLookups    int64            `json:"hot_lookups"`
	HitRate       float64          `json:"hit_rate"` // HotLookups / Lookups: the expected share served resident
	Curve         []ResidencyPoint `json:"curve"`    // the best hit rate at 0, 10, ..., 100 % of ExpertBytes
	// Order lists every expert: the Hot resident ones first (most-routed first), then the others in
	// the order the board streams them (most-routed first; ties by layer, then index).
	Order []ResidencyExpert `json:"order"`
}

// ResidencyPoint is one point of the hit-rate curve.
type ResidencyPoint struct {
	Fraction    float64 `json:"fraction"` // of ExpertBytes
	BudgetBytes int64   `json:"budget_bytes"`
	Hot         int     `json:"hot"`
	HotBytes    int64   `json:"hot_bytes"`
	HitRate     float64 `json:"hit_rate"`
}

// ResidencyExpert is one expert of the plan.
type ResidencyExpert struct {
	Layer   int      `json:"layer"`
	Expert  int      `json:"expert"`
	Lookups int64    `json:"lookups"`
	Bytes   int64    `json:"bytes"`
	Entries []string `json:"entries"`
}

// Pack returns the plan as the pack's residency section holds it.
func (f *ResidencyFile) Pack() (pack.Residency, error) {
	d, err := artifacts.ParseDigest(f.Routing)
	if err != nil {
		return pack.Residency{}, fmt.Errorf("residency.json: routing: %w", err)
	}
	r := pack.Residency{Domains: f.Domains, Budget: f.BudgetBytes, Routing: pack.Digest(d.Bytes()), Hot: f.Hot}
	for _, x := range f.Order {
		r.Experts = append(r.Experts, pack.ResidentExpert{Layer: x.Layer, Index: x.Expert, Lookups: x.Lookups, Entries: x.Entries})
	}
	return r, nil
}

// curveFractions are the budgets of the hit-rate curve, as fractions of every expert's bytes.
var curveFractions = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}

func init() {
	Register(Define("residency", 1, func(p ResidencyParams) (Spec, error) {
		if _, err := board.ParseBudget(p.Budget); err != nil {
			return Spec{}, err
		}
		if p.Domains < 1 || len(p.Entries) == 0 {
			return Spec{}, fmt.Errorf("domains %d (>= 1), %d entries (>= 1): invalid", p.Domains, len(p.Entries))
		}
		if _, err := plannedEntries(p.Entries); err != nil {
			return Spec{}, err
		}
		s := Spec{Inputs: []string{"routing"}, Outputs: []string{"residency.json"}, PeakMemory: 64<<20 + int64(len(p.Entries))*2048}
		if p.Board == "" {
			s.Inputs = append(s.Inputs, "board")
		} else if _, ok := board.Builtin(p.Board); !ok {
			return Spec{}, fmt.Errorf("board %q: no built-in profile of that name", p.Board)
		}
		return s, nil
	}, runResidency))
}

// plannedEntries turns planned entries into pack entries holding what ResidentBytes reads.
func plannedEntries(ps []PlannedEntry) ([]pack.Entry, error) {
	es := make([]pack.Entry, len(ps))
	for i, p := range ps {
		dt, err := pack.ParseDType(p.DType)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", p.Name, err)
		}
		es[i] = pack.Entry{Meta: pack.Meta{Name: p.Name, DType: dt, K: p.K, N: p.N}}
	}
	return es, nil
}

func runResidency(ctx context.Context, p ResidencyParams, req Request) error {
	prof, err := boardProfile(p.Board, req)
	if err != nil {
		return err
	}
	budget, _ := board.ParseBudget(p.Budget)
	entries, _ := plannedEntries(p.Entries)
	routing, err := readRouting(req.Inputs["routing"])
	if err != nil {
		return err
	}
	if err := routingCovers(routing, entries); err != nil {
		return fmt.Errorf("%s: %w", req.Inputs["routing"].Path, err)
	}
	plan, err := board.PlanResidency(entries, routing.Count, budget, p.Domains, prof)
	if err != nil {
		return err
	}
	f := ResidencyFile{Board: prof.Name, Domains: p.Domains, WindowBytes: plan.Window.Bytes, DenseBytes: plan.Dense, Experts: plan.Window.Experts,
		ExpertEntries: plan.Entries, ExpertBytes: plan.All, Budget: p.Budget, BudgetBytes: plan.Budget, Routing: req.Inputs["routing"].Digest.String(),
		Hot: plan.Hot, HotBytes: plan.HotBytes, Lookups: plan.Lookups, HotLookups: plan.HotLookups, HitRate: plan.HitRate()}
	budgets := make([]int64, len(curveFractions))
	for i, fr := range curveFractions {
		budgets[i] = int64(fr * float64(plan.All))
	}
	curve, err := board.HitCurve(plan.Experts, budgets)
	if err != nil {
		return err
	}
	for i, c := range curve {
		f.Curve = append(f.Curve, ResidencyPoint{Fraction: curveFractions[i], BudgetBytes: c.Budget, Hot: c.Hot, HotBytes: c.HotBytes, HitRate: rate(c.HotLookups, plan.Lookups)})
	}
	for _, x := range plan.Experts {
		rx := ResidencyExpert{Layer: x.Layer, Expert: x.Index, Lookups: x.Lookups, Bytes: x.Bytes}
		for _, i := range x.Entries {
			rx.Entries = append(rx.Entries, entries[i].Name)
		}
		f.Order = append(f.Order, rx)
	}
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(req.Output("residency.json"), append(b, '\n'), 0o644)
}

// routingCovers checks that the routing statistics hold every block and expert index the pack's expert
// entries name.
func routingCovers(r calib.Routing, entries []pack.Entry) error {
	for _, e := range entries {
		l, x, ok := pack.ExpertBlock(e.Name)
		if !ok {
			continue
		}
		if !slices.ContainsFunc(r.Layers, func(lr calib.LayerRouting) bool { return lr.Layer == l }) || x >= r.Experts {
			return fmt.Errorf("routing statistics of %d experts have no block %d expert %d (entry %q): statistics of another model?", r.Experts, l, x, e.Name)
		}
	}
	return nil
}

func rate(part, all int64) float64 {
	if all == 0 {
		return 0
	}
	return float64(part) / float64(all)
}

// ReadResidency reads a residency.json strictly (unknown fields are errors).
func ReadResidency(f File) (*ResidencyFile, error) {
	var r ResidencyFile
	if err := readJSONFile(f.Path, &r); err != nil {
		return nil, fmt.Errorf("residency plan: %w", err)
	}
	return &r, nil
}
