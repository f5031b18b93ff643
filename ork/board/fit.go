package board

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Sized is one entry's resident size.
type Sized struct {
	Name  string
	Bytes int64
}

// largestShown is how many of the largest entries a FitError lists.
const largestShown = 5

// FitError is why a plan does not fit a board. It wraps ErrDoesNotFit and carries the numbers: the
// domains the plan needs and the board has, what one domain holds, the entries too large for any domain
// and the largest entries. PlanDomains returns it, so the planner (before anything is built), the pack
// writer and verify report the same figures.
type FitError struct {
	Board     string
	Needed    int     // domains the plan needs (an entry larger than a domain counted as one domain)
	Available int     // domains the board has (Profile.MaxDomains)
	Capacity  int64   // bytes one domain holds (Profile.Capacity)
	Total     int64   // resident bytes of every entry
	Oversized []Sized // entries larger than one domain, in index order
	Largest   []Sized // the largest entries, largest first (ties in index order), at most 5
}

func (e *FitError) Unwrap() error { return ErrDoesNotFit }

func (e *FitError) Error() string {
	var b strings.Builder
	b.WriteString(ErrDoesNotFit.Error() + ": ")
	if len(e.Oversized) > 0 {
		o := e.Oversized[0]
		fmt.Fprintf(&b, "entry %q needs %s resident, more than one %s domain holds (%s)", o.Name, gib(o.Bytes), e.Board, gib(e.Capacity))
		switch n := len(e.Oversized) - 1; {
		case n == 1:
			b.WriteString(", and 1 more entry does too")
		case n > 1:
			fmt.Fprintf(&b, ", and %d more entries do too", n)
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "needs %d domains, %s has %d; %s resident, %s per domain", e.Needed, e.Board, e.Available, gib(e.Total), gib(e.Capacity))
	if len(e.Largest) > 0 {
		b.WriteString("; largest entries:")
		for i, s := range e.Largest {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %s %s", s.Name, gib(s.Bytes))
		}
	}
	return b.String()
}

// largest returns the n largest of sizes (by resident bytes, ties in index order), largest first.
func largest(names []string, sizes []int64, n int) []Sized {
	idx := make([]int, len(sizes))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(sizes[b], sizes[a]) })
	out := make([]Sized, 0, min(n, len(idx)))
	for _, i := range idx[:min(n, len(idx))] {
		out = append(out, Sized{names[i], sizes[i]})
	}
	return out
}

// ResidencyError is why a residency plan cannot exist (ResidencyWindow, PlanResidency): what was asked to
// be resident beside the dense entries does not fit the window of the domains given to residency. It
// wraps ErrDoesNotFit and carries the numbers: the window, the dense bytes, the experts and their bytes,
// what was asked and how many experts would fit.
type ResidencyError struct {
	Window              // the window, the dense entries, every expert, the budget resolved to bytes
	Budget       Budget // as asked
	Asked        int    // experts asked resident: all of them; -1 for a budget's worth; 0: the dense entries alone do not fit
	AskedEntries int
	AskedBytes   int64
	Fit          int // experts that fit beside the dense entries, smallest first
}

func (e *ResidencyError) Unwrap() error { return ErrDoesNotFit }

func (e *ResidencyError) Error() string {
	var b strings.Builder
	win := fmt.Sprintf("the %d-domain window of %s (%s = %d × %s per domain)", e.Domains, e.Board, gib(e.Bytes), e.Domains, gib(e.Bytes/int64(e.Domains)))
	b.WriteString(ErrDoesNotFit.Error() + ": residency: ")
	switch {
	case e.Asked == 0:
		fmt.Fprintf(&b, "the dense entries alone (%s resident) do not fit %s; no expert can be resident", gib(e.Dense), win)
		return b.String()
	case e.Asked > 0:
		fmt.Fprintf(&b, "every expert resident (%d experts, %d entries, %s) beside the dense entries (%s) needs %s, more than %s holds",
			e.Asked, e.AskedEntries, gib(e.AskedBytes), gib(e.Dense), gib(e.Dense+e.AskedBytes), win)
	default:
		fmt.Fprintf(&b, "budget %s (%s of the experts' %s) beside the dense entries (%s) needs %s, more than %s holds",
			e.Budget, gib(e.AskedBytes), gib(e.All), gib(e.Dense), gib(e.Dense+e.AskedBytes), win)
	}
	fmt.Fprintf(&b, "; at most %d of the %d experts fit beside the dense entries (budget auto plans the most-routed that fit)", e.Fit, e.Experts)
	return b.String()
}
