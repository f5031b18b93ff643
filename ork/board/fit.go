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
