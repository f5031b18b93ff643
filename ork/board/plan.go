package board

import (
	"context"
	"fmt"

	"orkpipe/ork/internal/checked"
	"orkpipe/ork/pack"
)

// Plan places entries, in execution (index) order, into IOMMU domains.
type Plan struct {
	Board       string
	Profile     pack.Digest
	Capacity    int64   // bytes one domain may hold
	Resident    []int64 // per entry, from ResidentBytes
	Domain      []int   // per entry
	DomainBytes []int64 // per domain
	Total       int64
}

// Domains returns how many domains the plan uses.
func (pl Plan) Domains() int { return len(pl.DomainBytes) }

// PlanDomains assigns entries in order to domains, opening the next domain when the current one cannot take
// the next entry under the profile's capacity (ceiling - headroom). It needs only each entry's name, dtype,
// K and N (through ResidentBytes), so a planner can call it on entries not yet written. It fails with a
// *FitError (wrapping ErrDoesNotFit) when an entry exceeds a domain or the plan needs more domains than the
// board has, and with ResidentBytes' error when the profile cannot hold an entry's dtype or shape. Resident
// bytes whose sum overflows int64 fit no board: an error wrapping ErrDoesNotFit names the entry that
// overflows it.
func PlanDomains(entries []pack.Entry, p Profile) (Plan, error) {
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	pl := Plan{Board: p.Name, Profile: p.Digest(), Capacity: p.Capacity(),
		Resident: make([]int64, len(entries)), Domain: make([]int, len(entries))}
	var oversized []Sized
	for i, e := range entries {
		r, err := ResidentBytes(e, p)
		if err != nil {
			return Plan{}, err
		}
		if r > pl.Capacity {
			oversized = append(oversized, Sized{e.Name, r})
		}
		total, ok := checked.Add(pl.Total, r)
		if !ok {
			return Plan{}, fmt.Errorf("%w: entry %q (index %d): its %d resident bytes on %s overflow the %d bytes of the entries before it", ErrDoesNotFit, e.Name, i, r, p.Name, pl.Total)
		}
		// A domain's bytes are at most the total: their sum with r does not overflow either.
		d := len(pl.DomainBytes) - 1
		if d < 0 || pl.DomainBytes[d]+r > pl.Capacity {
			pl.DomainBytes = append(pl.DomainBytes, 0)
			d++
		}
		pl.DomainBytes[d] += r
		pl.Resident[i], pl.Domain[i] = r, d
		pl.Total = total
	}
	if len(oversized) > 0 || pl.Domains() > p.MaxDomains {
		names := make([]string, len(entries))
		for i, e := range entries {
			names[i] = e.Name
		}
		return Plan{}, &FitError{Board: p.Name, Needed: pl.Domains(), Available: p.MaxDomains, Capacity: pl.Capacity,
			Total: pl.Total, Oversized: oversized, Largest: largest(names, pl.Resident, largestShown)}
	}
	return pl, nil
}

// gib formats a byte count for messages: GiB with two decimals, or MiB/KiB when smaller.
func gib(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2f KiB", float64(b)/(1<<10))
}

// Planner returns the pack.Planner that plans with PlanDomains on profile p.
func Planner(p Profile) pack.Planner { return planner{p} }

type planner struct{ p Profile }

func (pr planner) Plan(ctx context.Context, entries []pack.Entry) (pack.Plan, error) {
	if err := ctx.Err(); err != nil {
		return pack.Plan{}, err
	}
	pl, err := PlanDomains(entries, pr.p)
	if err != nil {
		return pack.Plan{}, err
	}
	return pack.Plan{
		Board:    pack.Board{Name: pl.Board, Profile: pl.Profile, Domains: pl.Domains(), Resident: pl.Total},
		Resident: pl.Resident,
		Domain:   pl.Domain,
	}, nil
}

// CheckPlan recomputes the plan of a pack's entries on profile p and compares it with what the index stores:
// profile name and digest, domain count, and each entry's resident bytes and domain.
func CheckPlan(stored pack.Board, entries []pack.Entry, p Profile) error {
	if stored.Name != p.Name || stored.Profile != p.Digest() {
		return fmt.Errorf("%w: pack was planned for board %q (profile %s), checking against %q (profile %s)", ErrPlanDiffers, stored.Name, stored.Profile, p.Name, p.Digest())
	}
	pl, err := PlanDomains(entries, p)
	if err != nil {
		return err
	}
	if pl.Domains() != stored.Domains || pl.Total != stored.Resident {
		return fmt.Errorf("%w: index says %d domains and %d resident bytes, recomputed %d and %d", ErrPlanDiffers, stored.Domains, stored.Resident, pl.Domains(), pl.Total)
	}
	for i, e := range entries {
		if e.ResidentBytes != pl.Resident[i] || e.Domain != pl.Domain[i] {
			return fmt.Errorf("%w: entry %q: index says %d bytes in domain %d, recomputed %d bytes in domain %d", ErrPlanDiffers, e.Name, e.ResidentBytes, e.Domain, pl.Resident[i], pl.Domain[i])
		}
	}
	return nil
}
