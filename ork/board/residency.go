package board

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"orkpipe/ork/internal/checked"
	"orkpipe/ork/pack"
)

// Expert is one expert of one MoE block as residency sees it: every pack entry that is its slice of an
// expert tensor of that block ("blk.<Layer>.<tensor>#<Index>": gate, up and down), which the board loads
// and streams together, with their resident bytes summed (ResidentBytes) and the lookups the routing
// statistics saw it serve.
type Expert struct {
	Layer, Index int
	Entries      []int // positions in the pack's entries, ascending
	Bytes        int64
	Lookups      int64
}

// Experts groups the expert-slice entries of entries by block and expert index (ordered by layer, then
// index) and returns them with the positions of the other (dense) entries. An expert slice whose tensor
// is not "blk.<l>.<name>" is an error: its block is unknown, as is an expert whose entries' resident bytes
// sum past int64.
func Experts(entries []pack.Entry, p Profile) (experts []Expert, dense []int, err error) {
	by := map[[2]int]*Expert{}
	for i, e := range entries {
		if _, _, ok := pack.SplitExpert(e.Name); !ok {
			dense = append(dense, i)
			continue
		}
		l, x, ok := pack.ExpertBlock(e.Name)
		if !ok {
			return nil, nil, fmt.Errorf("residency: expert entry %q is not in a block (blk.<layer>.<tensor>#<e>)", e.Name)
		}
		r, err := ResidentBytes(e, p)
		if err != nil {
			return nil, nil, err
		}
		u := by[[2]int{l, x}]
		if u == nil {
			u = &Expert{Layer: l, Index: x}
			by[[2]int{l, x}] = u
		}
		u.Entries = append(u.Entries, i)
		if u.Bytes, ok = checked.Add(u.Bytes, r); !ok {
			return nil, nil, fmt.Errorf("%w: residency: expert %d of layer %d: entry %q's %d resident bytes on %s overflow its other entries'", ErrDoesNotFit, x, l, e.Name, r, p.Name)
		}
	}
	for _, u := range by {
		experts = append(experts, *u)
	}
	slices.SortFunc(experts, func(a, b Expert) int { return cmp.Or(cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Index, b.Index)) })
	return experts, dense, nil
}

// Budget is how many resident bytes the hot experts may take: Auto (what the residency window holds
// beside the dense entries), Percent of every expert's resident bytes (0 < Percent <= 100), or Bytes.
type Budget struct {
	Auto    bool
	Percent float64
	Bytes   int64
}

// ParseBudget reads a budget's canonical text: "auto", "<p>%" or a number of bytes.
func ParseBudget(s string) (Budget, error) {
	switch {
	case s == "auto":
		return Budget{Auto: true}, nil
	case strings.HasSuffix(s, "%"):
		p, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil || !(p > 0 && p <= 100) {
			return Budget{}, fmt.Errorf("residency budget %q: want a percentage in (0, 100]", s)
		}
		return Budget{Percent: p}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return Budget{}, fmt.Errorf("residency budget %q: want auto, a percentage of the experts' bytes (25%%) or a number of bytes >= 0", s)
	}
	return Budget{Bytes: n}, nil
}

// String is the budget's canonical text (ParseBudget reads it back).
func (b Budget) String() string {
	switch {
	case b.Auto:
		return "auto"
	case b.Percent > 0:
		return strconv.FormatFloat(b.Percent, 'g', -1, 64) + "%"
	}
	return strconv.FormatInt(b.Bytes, 10)
}

// Window is where residency plans: Domains IOMMU domains of a profile, holding the dense entries and the
// hot experts at once.
type Window struct {
	Board   string
	Domains int   // IOMMU domains the resident set may use
	Bytes   int64 // Domains × the profile's Capacity
	Dense   int64 // resident bytes of the dense (non-expert) entries
	Experts int   // experts of the pack, and their entries and resident bytes
	Entries int
	All     int64
	Budget  int64 // the budget resolved to bytes (never more than All)
}

// ResidencyWindow checks, from entries' shapes alone (before any routing is known), that a residency plan
// under budget can exist on domains domains of p: the dense entries must fit them, and the dense entries
// plus budget bytes of experts must fit their bytes (every expert, when the budget covers them all,
// placed by PlanDomains as the loader will). It fails with a *ResidencyError (wrapping ErrDoesNotFit)
// naming the experts, bytes and window; on success it returns the window and the resolved budget.
func ResidencyWindow(entries []pack.Entry, budget Budget, domains int, p Profile) (Window, []Expert, []int, error) {
	if err := p.Validate(); err != nil {
		return Window{}, nil, nil, err
	}
	if domains < 1 || domains > p.MaxDomains {
		return Window{}, nil, nil, fmt.Errorf("%w %q: residency over %d domains: want 1..%d (max_domains)", ErrProfile, p.Name, domains, p.MaxDomains)
	}
	experts, dense, err := Experts(entries, p)
	if err != nil {
		return Window{}, nil, nil, err
	}
	w := Window{Board: p.Name, Domains: domains, Experts: len(experts)}
	var ok bool
	if w.Bytes, ok = checked.Mul(int64(domains), p.Capacity()); !ok {
		return Window{}, nil, nil, fmt.Errorf("%w %q: residency over %d domains of %d bytes: the window overflows int64", ErrProfile, p.Name, domains, p.Capacity())
	}
	for _, x := range experts {
		if w.All, ok = checked.Add(w.All, x.Bytes); !ok {
			return Window{}, nil, nil, fmt.Errorf("%w: residency: expert %d of layer %d: its %d resident bytes on %s overflow the experts' before it", ErrDoesNotFit, x.Index, x.Layer, x.Bytes, p.Name)
		}
		w.Entries += len(x.Entries)
	}
	for _, i := range dense {
		r, err := ResidentBytes(entries[i], p)
		if err != nil {
			return Window{}, nil, nil, err
		}
		if w.Dense, ok = checked.Add(w.Dense, r); !ok {
			return Window{}, nil, nil, fmt.Errorf("%w: residency: dense entry %q: its %d resident bytes on %s overflow the dense entries' before it", ErrDoesNotFit, entries[i].Name, r, p.Name)
		}
	}
	switch {
	case budget.Auto:
		w.Budget = max(0, w.Bytes-w.Dense)
	case budget.Percent > 0:
		w.Budget = int64(math.Floor(budget.Percent / 100 * float64(w.All)))
	default:
		w.Budget = budget.Bytes
	}
	w.Budget = min(w.Budget, w.All)
	fail := func(asked int, askedEntries int, askedBytes int64) error {
		return &ResidencyError{Window: w, Budget: budget, Asked: asked, AskedEntries: askedEntries, AskedBytes: askedBytes, Fit: fitCount(experts, w.Bytes-w.Dense)}
	}
	if !fitsDomains(entries, dense, p, domains) {
		return Window{}, nil, nil, fail(0, 0, 0)
	}
	if !budget.Auto && w.Budget == w.All && w.All > 0 {
		all := slices.Clone(dense)
		for _, x := range experts {
			all = append(all, x.Entries...)
		}
		slices.Sort(all)
		if !fitsDomains(entries, all, p, domains) {
			return Window{}, nil, nil, fail(len(experts), w.Entries, w.All)
		}
	} else if w.Dense+w.Budget > w.Bytes {
		return Window{}, nil, nil, fail(-1, 0, w.Budget)
	}
	return w, experts, dense, nil
}

// fitsDomains reports whether the entries at positions idx (ascending), placed in index order by
// PlanDomains, fit domains domains of p.
func fitsDomains(entries []pack.Entry, idx []int, p Profile, domains int) bool {
	return placeDomains(entries, idx, p, domains) == nil
}

// placeDomains places the entries at positions idx (ascending) in index order on domains domains of p
// (PlanDomains' error when they do not fit).
func placeDomains(entries []pack.Entry, idx []int, p Profile, domains int) error {
	sub := make([]pack.Entry, len(idx))
	for j, i := range idx {
		sub[j] = entries[i]
	}
	q := p
	q.MaxDomains = domains
	_, err := PlanDomains(sub, q)
	return err
}

// fitCount is how many experts fit in room bytes, smallest first.
func fitCount(experts []Expert, room int64) int {
	sizes := make([]int64, len(experts))
	for i, x := range experts {
		sizes[i] = x.Bytes
	}
	slices.Sort(sizes)
	n := 0
	for _, s := range sizes {
		if s > room {
			break
		}
		room -= s
		n++
	}
	return n
}

// Residency is a residency plan: which experts of an MoE pack the board loads at start (the first Hot of
// Experts, most-routed first) and the order in which it streams the others (the rest of Experts,
// most-routed first); ties by layer, then expert index.
type Residency struct {
	Window
	Experts    []Expert
	Hot        int
	HotBytes   int64
	Lookups    int64 // every expert's lookups in the routing statistics
	HotLookups int64 // the hot experts'
}

// HitRate is the expected share of routed lookups served by resident experts: HotLookups / Lookups (0
// when the statistics hold no lookup).
func (r Residency) HitRate() float64 {
	if r.Lookups == 0 {
		return 0
	}
	return float64(r.HotLookups) / float64(r.Lookups)
}

// PlanResidency chooses the hot experts of entries (index order) under budget on domains domains of p,
// from lookups(layer, expert) (the routing statistics; every expert entry's block must be one of theirs).
// It checks the window first (ResidencyWindow), then takes the exact knapsack (Choose) of the experts'
// lookups under the resolved budget. On more than one domain, where first-fit placement can strand bytes
// at domain ends, a hot set whose entries with the dense ones do not fit the domains (PlanDomains, as
// the loader places them) is replaced by the knapsack under a budget one byte below its bytes, until one
// fits; on one domain the window check makes that unnecessary.
func PlanResidency(entries []pack.Entry, lookups func(layer, expert int) int64, budget Budget, domains int, p Profile) (Residency, error) {
	w, experts, dense, err := ResidencyWindow(entries, budget, domains, p)
	if err != nil {
		return Residency{}, err
	}
	for i := range experts {
		experts[i].Lookups = lookups(experts[i].Layer, experts[i].Index)
	}
	b := w.Budget
	for {
		hot, err := Choose(experts, b)
		if err != nil {
			return Residency{}, err
		}
		r := residency(w, experts, hot)
		idx := slices.Clone(dense)
		for _, x := range r.Experts[:r.Hot] {
			idx = append(idx, x.Entries...)
		}
		slices.Sort(idx)
		if fitsDomains(entries, idx, p, domains) {
			return r, nil
		}
		b = r.HotBytes - 1
	}
}

// residency orders the experts (hot first, each part most-routed first) and sums the plan.
func residency(w Window, experts []Expert, hot []bool) Residency {
	r := Residency{Window: w}
	var cold []Expert
	for i, x := range experts {
		r.Lookups += x.Lookups
		if hot[i] {
			r.Experts = append(r.Experts, x)
			r.HotBytes += x.Bytes
			r.HotLookups += x.Lookups
		} else {
			cold = append(cold, x)
		}
	}
	r.Hot = len(r.Experts)
	byRouting := func(a, b Expert) int {
		return cmp.Or(cmp.Compare(b.Lookups, a.Lookups), cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Index, b.Index))
	}
	slices.SortStableFunc(r.Experts, byRouting)
	slices.SortStableFunc(cold, byRouting)
	r.Experts = append(r.Experts, cold...)
	return r
}

// CurvePoint is the best hit rate under one budget.
type CurvePoint struct {
	Budget     int64 // bytes
	Hot        int
	HotBytes   int64
	HotLookups int64
}

// HitCurve returns the exact knapsack's result (Choose) for each budget: how the expected hit rate grows
// with the bytes given to hot experts, whatever the window (a planning aid, not a plan).
func HitCurve(experts []Expert, budgets []int64) ([]CurvePoint, error) {
	out := make([]CurvePoint, len(budgets))
	for i, b := range budgets {
		hot, err := Choose(experts, b)
		if err != nil {
			return nil, err
		}
		out[i].Budget = b
		for j, h := range hot {
			if h {
				out[i].Hot++
				out[i].HotBytes += experts[j].Bytes
				out[i].HotLookups += experts[j].Lookups
			}
		}
	}
	return out, nil
}

// CheckResidency checks a residency plan against entries (index order) on profile p: the hot experts'
// resident bytes (ResidentBytes) stay within its budget, and the dense entries with the hot experts'
// entries, placed in index order as the loader places them (PlanDomains), fit the plan's domains of p.
// Either failure wraps ErrDoesNotFit. The pack writer and reader check the rest of the plan against the
// entries (every expert entry listed once, under its block and index).
func CheckResidency(res pack.Residency, entries []pack.Entry, p Profile) error {
	if res.Domains > p.MaxDomains || res.Hot > len(res.Experts) {
		return fmt.Errorf("%w: residency plan for %d domains (%s has %d), %d hot of %d experts", ErrPlanDiffers, res.Domains, p.Name, p.MaxDomains, res.Hot, len(res.Experts))
	}
	hot := map[string]bool{}
	for _, x := range res.Experts[:res.Hot] {
		for _, name := range x.Entries {
			hot[name] = true
		}
	}
	var hotBytes int64
	for _, e := range entries {
		if hot[e.Name] {
			r, err := ResidentBytes(e, p)
			if err != nil {
				return err
			}
			var ok bool
			if hotBytes, ok = checked.Add(hotBytes, r); !ok {
				return fmt.Errorf("%w: residency plan: hot entry %q: its %d resident bytes on %s overflow the hot entries' before it", ErrDoesNotFit, e.Name, r, p.Name)
			}
		}
	}
	if hotBytes > res.Budget {
		return fmt.Errorf("%w: residency plan: the %d hot experts take %s resident on %s, more than its budget %s", ErrDoesNotFit, res.Hot, gib(hotBytes), p.Name, gib(res.Budget))
	}
	var idx []int
	for i, e := range entries {
		if _, _, isExpert := pack.ExpertBlock(e.Name); !isExpert || hot[e.Name] {
			idx = append(idx, i)
		}
	}
	if err := placeDomains(entries, idx, p, res.Domains); err != nil {
		return fmt.Errorf("residency plan: the dense entries and the %d hot experts do not fit %d domains of %s: %w", res.Hot, res.Domains, p.Name, err)
	}
	return nil
}
