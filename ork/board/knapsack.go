package board

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"orkpipe/ork/internal/checked"
)

// Limits of the exact knapsack (Choose): the DP's work (budget units × experts) and its choice table.
const (
	maxKnapsackWork  = 4e9
	maxKnapsackTable = 512 << 20
)

// Choose returns which experts to keep resident under budget bytes: of all the sets whose Bytes sum to at
// most budget, one with the largest total Lookups, and among those one with the most experts (so spare
// room holds experts the statistics never saw routed, which a held-out text may route to). It is an
// exact 0/1 knapsack, deterministic (ties broken by the experts' order).
//
// Experts of one size class (one tensor family at one dtype: every expert of a block has the same shapes)
// are interchangeable by size, so within a class the best m experts are always its m most-routed ones
// (exchange argument: swapping a chosen expert for a more-routed unchosen one of the same size keeps the
// set within budget and never lowers its value). With a single class the answer is therefore the greedy
// one: the floor(budget/size) most-routed experts. Across classes greedy by lookups per byte is not exact
// (sizes 3, 2, 2 with lookups 3, 1.9, 1.9 under budget 4: greedy takes the 3 for 3, the optimum the two 2s
// for 3.8), so Choose combines the classes by dynamic programming over the budget in units of the
// greatest common divisor of the class sizes, choosing how many of each class's best to take. It refuses
// (an error, never an approximation) an instance whose table would exceed its work or memory limits, and
// experts whose bytes or lookups sum past int64 (naming the expert that overflows them): a sum within it
// bounds every subset's, so callers may add up any chosen set unchecked.
func Choose(experts []Expert, budget int64) ([]bool, error) {
	hot := make([]bool, len(experts))
	var total, lookups int64
	for i, x := range experts {
		if x.Bytes <= 0 || x.Lookups < 0 {
			return nil, fmt.Errorf("residency: expert %d of layer %d: %d bytes, %d lookups: want bytes > 0 and lookups >= 0", x.Index, x.Layer, x.Bytes, x.Lookups)
		}
		var okB, okL bool
		total, okB = checked.Add(total, x.Bytes)
		lookups, okL = checked.Add(lookups, x.Lookups)
		if !okB || !okL {
			return nil, fmt.Errorf("residency: expert %d of layer %d: %d bytes, %d lookups: the experts' bytes or lookups up to it overflow int64", x.Index, x.Layer, x.Bytes, x.Lookups)
		}
		hot[i] = true
	}
	if budget >= total {
		return hot, nil
	}
	clear(hot)
	if budget <= 0 {
		return hot, nil
	}
	if lookups > math.MaxInt64/int64(len(experts)+1)-int64(len(experts)) {
		return nil, fmt.Errorf("residency: %d lookups over %d experts overflow the exact knapsack's values", lookups, len(experts))
	}
	classes := sizeClasses(experts)
	// value of a set: lookups first, then the number of experts (lexicographic, as one integer)
	scale := int64(len(experts) + 1)
	if len(classes) == 1 {
		c := classes[0]
		for _, i := range c.members[:min(int64(len(c.members)), budget/c.size)] {
			hot[i] = true
		}
		return hot, nil
	}
	g := int64(0)
	for _, c := range classes {
		g = gcd(g, c.size)
	}
	units := int(min(budget, total) / g)
	work := float64(units+1) * float64(len(experts)+len(classes))
	if work > maxKnapsackWork || float64(len(classes))*float64(units+1)*4 > maxKnapsackTable {
		return nil, fmt.Errorf("residency: exact knapsack over %d size classes would need %d budget units of %d bytes (%.3g steps): too large; use fewer distinct expert sizes", len(classes), units, g, work)
	}
	dp := make([]int64, units+1) // best value within b units, classes so far
	next := make([]int64, units+1)
	choice := make([][]int32, len(classes))
	for ci, c := range classes {
		s := int(c.size / g)
		pick := make([]int32, units+1)
		for b := 0; b <= units; b++ {
			best, bm := dp[b], 0
			var v int64
			for m := 1; m <= len(c.members) && m*s <= b; m++ {
				v += experts[c.members[m-1]].Lookups*scale + 1
				if cand := dp[b-m*s] + v; cand > best {
					best, bm = cand, m
				}
			}
			next[b], pick[b] = best, int32(bm)
		}
		dp, next = next, dp
		choice[ci] = pick
	}
	b := units
	for ci := len(classes) - 1; ci >= 0; ci-- {
		m := int(choice[ci][b])
		for _, i := range classes[ci].members[:m] {
			hot[i] = true
		}
		b -= m * int(classes[ci].size/g)
	}
	return hot, nil
}

// sizeClass is the experts of one resident size, most-routed first (ties in the experts' order).
type sizeClass struct {
	size    int64
	members []int
}

func sizeClasses(experts []Expert) []sizeClass {
	by := map[int64][]int{}
	for i, x := range experts {
		by[x.Bytes] = append(by[x.Bytes], i)
	}
	var out []sizeClass
	for size, m := range by {
		slices.SortStableFunc(m, func(a, b int) int { return cmp.Compare(experts[b].Lookups, experts[a].Lookups) })
		out = append(out, sizeClass{size, m})
	}
	slices.SortFunc(out, func(a, b sizeClass) int { return cmp.Compare(a.size, b.size) })
	return out
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
