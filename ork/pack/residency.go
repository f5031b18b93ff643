package pack

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Residency is the residency plan of an MoE pack (docs/orkpack.md 3.1, version 3): which experts the board
// loads at start and in which order it streams the others. Experts lists every expert of the pack, the
// first Hot of them resident from the start, the rest in streaming order, each part in plan order
// (inOrder: most-routed first); their lookups sum to at most math.MaxInt64; the hot experts' resident bytes
// sum to at most Budget, and the dense entries with the hot experts' entries, placed in index order, fit
// Domains IOMMU domains (ork/board checks that part: it knows the domains).
type Residency struct {
	Domains int
	Budget  int64
	Routing Digest // BLAKE3 of the routing statistics (routing.json) the plan was made from
	Hot     int
	Experts []ResidentExpert
}

// ResidentExpert is one expert of one MoE block: the entries that are its slices of that block's expert
// tensors, which load and stream together, and the lookups it served in the routing statistics.
type ResidentExpert struct {
	Layer, Index int
	Lookups      int64
	Entries      []string // entry names, in index order
}

// Lookups sums every expert's lookups (all) and the hot experts' (hot). The sums are exact for a plan the
// reader or the writer accepted, which refuse lookups whose sum passes math.MaxInt64.
func (r Residency) Lookups() (all, hot int64) {
	for i, x := range r.Experts {
		all += x.Lookups
		if i < r.Hot {
			hot += x.Lookups
		}
	}
	return all, hot
}

// HitRate is the expected share of routed lookups served by the hot experts (0 without lookups).
func (r Residency) HitRate() float64 {
	all, hot := r.Lookups()
	if all == 0 {
		return 0
	}
	return float64(hot) / float64(all)
}

// ExpertBlock returns the block and expert index of an expert-slice entry "blk.<layer>.<tensor>#<e>";
// ok is false for any other name.
func ExpertBlock(entry string) (layer, expert int, ok bool) {
	tensor, e, ok := SplitExpert(entry)
	if !ok {
		return 0, 0, false
	}
	rest, found := strings.CutPrefix(tensor, "blk.")
	idx, _, dot := strings.Cut(rest, ".")
	l, err := strconv.Atoi(idx)
	if !found || !dot || err != nil || l < 0 || strconv.Itoa(l) != idx {
		return 0, 0, false
	}
	return l, e, true
}

// Residency section layout (docs/orkpack.md 3.1).
const (
	residencyHeaderSize = 64
	residentFixed       = 20
	maxResidentEntries  = 1 << 16
)

var residencyMagic = [4]byte{'O', 'K', 'R', 'S'}

// encodeResidency encodes the section; positions maps entry names to index positions (the plan was
// checked against the entries by checkResidency).
func encodeResidency(r *Residency, positions map[string]int) []byte {
	b := make([]byte, residencyHeaderSize)
	copy(b[0:4], residencyMagic[:])
	le.PutUint32(b[4:], uint32(len(r.Experts)))
	le.PutUint32(b[8:], uint32(r.Hot))
	le.PutUint32(b[12:], uint32(r.Domains))
	le.PutUint64(b[16:], uint64(r.Budget))
	copy(b[24:56], r.Routing[:])
	for _, x := range r.Experts {
		b = le.AppendUint32(b, uint32(x.Layer))
		b = le.AppendUint32(b, uint32(x.Index))
		b = le.AppendUint64(b, uint64(x.Lookups))
		b = le.AppendUint32(b, uint32(len(x.Entries)))
		for _, name := range x.Entries {
			b = le.AppendUint32(b, uint32(positions[name]))
		}
	}
	return b
}

// decodeResidency parses the section of a version-3 index and checks it against the entries.
func decodeResidency(b []byte, entries []Entry) (*Residency, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: residency section: %s", ErrIndex, fmt.Sprintf(format, a...))
	}
	if len(b) < residencyHeaderSize {
		return nil, bad("%d bytes, less than its %d-byte header", len(b), residencyHeaderSize)
	}
	if [4]byte(b[0:4]) != residencyMagic {
		return nil, bad("magic %q, want %q", b[0:4], residencyMagic[:])
	}
	if le.Uint64(b[56:]) != 0 {
		return nil, bad("reserved bytes 56..63 are not zero")
	}
	n := le.Uint32(b[4:])
	if budget := le.Uint64(b[16:]); budget > math.MaxInt64 {
		return nil, bad("budget %d: want less than 2^63", budget)
	}
	r := &Residency{Hot: int(le.Uint32(b[8:])), Domains: int(le.Uint32(b[12:])), Budget: int64(le.Uint64(b[16:])), Routing: Digest(b[24:56])}
	if uint64(n) > uint64(len(b)-residencyHeaderSize)/(residentFixed+4) {
		return nil, bad("%d experts cannot fit in %d bytes", n, len(b))
	}
	r.Experts = make([]ResidentExpert, n)
	p := residencyHeaderSize
	for i := range r.Experts {
		if p+residentFixed > len(b) {
			return nil, bad("expert record %d: the section ends at byte %d", i, len(b))
		}
		x := &r.Experts[i]
		x.Layer, x.Index = int(le.Uint32(b[p:])), int(le.Uint32(b[p+4:]))
		if l := le.Uint64(b[p+8:]); l > math.MaxInt64 {
			return nil, bad("expert record %d (layer %d, expert %d): lookups %d: want less than 2^63", i, x.Layer, x.Index, l)
		}
		x.Lookups = int64(le.Uint64(b[p+8:]))
		m := int(le.Uint32(b[p+16:]))
		p += residentFixed
		if m < 1 || m > maxResidentEntries || p+4*m > len(b) {
			return nil, bad("expert record %d (layer %d, expert %d): %d entries: want 1..%d within the section", i, x.Layer, x.Index, m, maxResidentEntries)
		}
		x.Entries = make([]string, m)
		for j := range x.Entries {
			pos := int(le.Uint32(b[p:]))
			p += 4
			if pos >= len(entries) {
				return nil, bad("expert record %d: entry position %d: the pack has %d entries", i, pos, len(entries))
			}
			x.Entries[j] = entries[pos].Name
		}
	}
	if p != len(b) {
		return nil, bad("%d bytes after the last expert record", len(b)-p)
	}
	if err := checkResidency(r, entries); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIndex, err)
	}
	return r, nil
}

// checkResidency checks a plan against the pack's entries (with their resident bytes): every expert-slice
// entry belongs to exactly one expert, which names its block and index; an expert's entries are listed in
// index order; no expert appears twice; lookups are >= 0 and their sum within int64; the hot experts and
// then the cold ones are each in plan order (inOrder: most-routed first, ties by layer, then expert index);
// the hot experts' resident bytes stay within the budget.
func checkResidency(r *Residency, entries []Entry) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("residency section: %s", fmt.Sprintf(format, a...))
	}
	switch {
	case len(r.Experts) == 0:
		return bad("no experts: want at least one")
	case r.Hot < 0 || r.Hot > len(r.Experts):
		return bad("%d hot of %d experts: want 0..%d", r.Hot, len(r.Experts), len(r.Experts))
	case r.Domains < 1 || r.Domains > 1<<16:
		return bad("domains %d: want 1..65536", r.Domains)
	case r.Budget < 0:
		return bad("budget %d: want >= 0", r.Budget)
	}
	pos := make(map[string]int, len(entries))
	for i, e := range entries {
		pos[e.Name] = i
	}
	owner := map[string]int{}
	seen := map[[2]int]bool{}
	var hot, lookups int64
	for i, x := range r.Experts {
		if seen[[2]int{x.Layer, x.Index}] {
			return bad("expert %d of layer %d listed twice", x.Index, x.Layer)
		}
		if x.Lookups < 0 {
			return bad("expert %d of layer %d: lookups %d: want >= 0", x.Index, x.Layer, x.Lookups)
		}
		seen[[2]int{x.Layer, x.Index}] = true
		var ok bool
		if lookups, ok = addSize(lookups, x.Lookups); !ok {
			return bad("expert %d of layer %d: its %d lookups take the experts' sum past %d", x.Index, x.Layer, x.Lookups, int64(math.MaxInt64))
		}
		if i > 0 && i != r.Hot && !inOrder(r.Experts[i-1], x) {
			part := "cold"
			if i < r.Hot {
				part = "hot"
			}
			p := r.Experts[i-1]
			return bad("expert %d of layer %d (%d lookups) after expert %d of layer %d (%d lookups): the %s experts are not in plan order (most-routed first, ties by layer, then expert index)",
				x.Index, x.Layer, x.Lookups, p.Index, p.Layer, p.Lookups, part)
		}
		if len(x.Entries) == 0 {
			return bad("expert %d of layer %d has no entries", x.Index, x.Layer)
		}
		last := -1
		for _, name := range x.Entries {
			p, ok := pos[name]
			l, e, isExpert := ExpertBlock(name)
			switch {
			case !ok:
				return bad("expert %d of layer %d: no entry %q", x.Index, x.Layer, name)
			case !isExpert || l != x.Layer || e != x.Index:
				return bad("entry %q listed under expert %d of layer %d", name, x.Index, x.Layer)
			case p <= last:
				return bad("expert %d of layer %d: entries not in index order", x.Index, x.Layer)
			}
			if j, dup := owner[name]; dup {
				return bad("entry %q listed by experts %d and %d", name, j, i)
			}
			owner[name], last = i, p
			if i < r.Hot {
				var ok bool
				if hot, ok = addSize(hot, entries[p].ResidentBytes); !ok {
					return bad("the hot experts' resident bytes pass %d at entry %q", int64(math.MaxInt64), name)
				}
			}
		}
	}
	for _, e := range entries {
		if _, _, isExpert := ExpertBlock(e.Name); isExpert && !hasKey(owner, e.Name) {
			return bad("expert entry %q is in no expert of the plan", e.Name)
		}
	}
	if hot > r.Budget {
		return bad("the %d hot experts take %d resident bytes, more than the budget %d", r.Hot, hot, r.Budget)
	}
	return nil
}

// inOrder reports whether expert a comes before b in plan order (docs/orkpack.md 3.1): more lookups
// first, ties by layer, then expert index.
func inOrder(a, b ResidentExpert) bool {
	if a.Lookups != b.Lookups {
		return a.Lookups > b.Lookups
	}
	if a.Layer != b.Layer {
		return a.Layer < b.Layer
	}
	return a.Index < b.Index
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}
