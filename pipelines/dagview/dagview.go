// Package dagview draws a build graph for people, as Graphviz DOT (`dot -Tsvg`) or a Mermaid
// flowchart: the text `orkpipe plan --format dot|mermaid` and `orkpipe explain --format ...` print.
//
// # Grouping
//
// A 27B recipe plans about a thousand nodes, most of them one per weight; drawn one box each they
// are unreadable. With grouping (the default) the nodes of one kind in one layer window become one
// box that says how many nodes it holds, how many are cached (or, for explain, ran) and the largest
// memory one of them declares. A node's kind is its id up to the first ":" or "[" (so finalize and
// finalize-promote are different kinds although they run the same stage); its window is the layer
// window of an id ending in "[a,b)" (calibrate[0,4), propagate[0,4)), or the window holding the
// block layer N of an id naming blk.N. (finalize:blk.3.attn_q.weight); a graph without windowed
// nodes is cut into at most 8 windows of whole layers. Nodes of no window (tokenize, write-orkpack,
// report, ...) stay single boxes; so does a group of one node. Boxes of a window are drawn inside a
// cluster (a Mermaid subgraph) named by its layers. Edges join boxes and are drawn once.
//
// Shading: a box whose nodes are all cached is grey, partly cached light grey; with States (explain)
// a box is coloured by what its nodes did in the last build: executed orange, failed red, cached grey.
// Output is deterministic: the same nodes give the same text.
package dagview

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"orkpipe/internal/units"
)

// Node is one node of the graph as the views need it.
type Node struct {
	ID, Stage string
	Deps      []string // ids of the nodes it consumes
	Mem       int64    // declared peak memory, bytes
	Cached    bool
	State     string // explain: "executed", "cached", "failed", "skipped", or "" (not in the last build)
	Note      string // one more line for a single box (explain: why it ran)
}

// box is what is drawn: one node, or a group of nodes of one kind in one window.
type box struct {
	id      string // the drawn id (b0, b1, ...)
	kind    string
	window  int // index into windows, -1 for none
	nodes   []*Node
	deps    map[string]bool // ids of boxes it consumes
	ordinal int             // position of its first node, for a stable order
}

type window struct{ lo, hi int } // layers [lo, hi)

// windowRE and layerRE are compiled on first use, not in a package init that every orkpipe command
// would run before main (docs/performance-log.md, "Start-up and hashing, session 11").
var (
	windowRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\[(\d+),(\d+)\)$`) })
	layerRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?:^|[:.])blk\.(\d+)\.`) })
)

// kindOf is a node id up to its first ":" or "[".
func kindOf(id string) string {
	if i := strings.IndexAny(id, ":["); i > 0 {
		return id[:i]
	}
	return id
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// layout groups nodes into boxes (each node its own box when group is false).
func layout(nodes []Node, group bool) ([]*box, []window) {
	var wins []window
	seen := map[window]bool{}
	maxLayer := -1
	for _, n := range nodes {
		if m := windowRE().FindStringSubmatch(n.ID); m != nil {
			w := window{atoi(m[1]), atoi(m[2])}
			if !seen[w] && w.hi > w.lo {
				seen[w] = true
				wins = append(wins, w)
			}
		}
		if m := layerRE().FindStringSubmatch(n.ID); m != nil {
			maxLayer = max(maxLayer, atoi(m[1]))
		}
	}
	if len(wins) == 0 && maxLayer >= 0 {
		step := (maxLayer + 8) / 8 // at most 8 windows of whole layers
		for lo := 0; lo <= maxLayer; lo += step {
			wins = append(wins, window{lo, min(lo+step, maxLayer+1)})
		}
	}
	sort.Slice(wins, func(i, j int) bool { return wins[i].lo < wins[j].lo })
	windowOf := func(id string) int {
		if m := windowRE().FindStringSubmatch(id); m != nil {
			w := window{atoi(m[1]), atoi(m[2])}
			for i, x := range wins {
				if x == w {
					return i
				}
			}
		}
		if m := layerRE().FindStringSubmatch(id); m != nil {
			l := atoi(m[1])
			for i, x := range wins {
				if l >= x.lo && l < x.hi {
					return i
				}
			}
		}
		return -1
	}
	var boxes []*box
	byKey := map[string]*box{}
	boxOf := map[string]*box{}
	for i := range nodes {
		n := &nodes[i]
		k, w := kindOf(n.ID), windowOf(n.ID)
		key := n.ID
		if group && w >= 0 {
			key = fmt.Sprintf("%s\x00%d", k, w)
		}
		b := byKey[key]
		if b == nil {
			b = &box{kind: k, window: w, deps: map[string]bool{}, ordinal: i}
			byKey[key] = b
			boxes = append(boxes, b)
		}
		b.nodes = append(b.nodes, n)
		boxOf[n.ID] = b
	}
	for i, b := range boxes {
		b.id = fmt.Sprintf("b%d", i)
	}
	for _, b := range boxes {
		for _, n := range b.nodes {
			for _, d := range n.Deps {
				if db := boxOf[d]; db != nil && db != b {
					b.deps[db.id] = true
				}
			}
		}
	}
	return boxes, wins
}

// label is a box's text lines.
func (b *box) label(explain bool) []string {
	if len(b.nodes) == 1 {
		n := b.nodes[0]
		second := units.FormatSize(n.Mem)
		if n.Stage != b.kind {
			second = n.Stage + " · " + second
		}
		lines := []string{n.ID, second}
		switch {
		case explain && n.State != "":
			lines = append(lines, n.State)
		case !explain && n.Cached:
			lines = append(lines, "cached")
		}
		if n.Note != "" {
			lines = append(lines, n.Note)
		}
		return lines
	}
	var mem int64
	cached := 0
	states := map[string]int{}
	for _, n := range b.nodes {
		mem = max(mem, n.Mem)
		if n.Cached {
			cached++
		}
		if n.State != "" {
			states[n.State]++
		}
	}
	head := fmt.Sprintf("%s ×%d", b.kind, len(b.nodes))
	if b.kind != b.nodes[0].Stage {
		head += " (" + b.nodes[0].Stage + ")"
	}
	lines := []string{head, "≤ " + units.FormatSize(mem) + " each"}
	if explain {
		var parts []string
		for _, s := range []string{"executed", "failed", "cached", "skipped"} {
			if states[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", states[s], s))
			}
		}
		if len(parts) > 0 {
			lines = append(lines, strings.Join(parts, ", "))
		}
		notes := map[string]bool{}
		for _, n := range b.nodes {
			if n.Note != "" {
				notes[n.Note] = true
			}
		}
		if len(notes) == 1 {
			for note := range notes {
				lines = append(lines, note)
			}
		}
	} else {
		lines = append(lines, fmt.Sprintf("%d/%d cached", cached, len(b.nodes)))
	}
	return lines
}

// fill is a box's colour.
func (b *box) fill(explain bool) string {
	if explain {
		states := map[string]bool{}
		for _, n := range b.nodes {
			states[n.State] = true
		}
		switch {
		case states["failed"]:
			return "#f4a6a6"
		case states["executed"]:
			return "#fdd49e"
		case states["cached"]:
			return "#d9d9d9"
		}
		return "#ffffff"
	}
	cached := 0
	for _, n := range b.nodes {
		if n.Cached {
			cached++
		}
	}
	switch {
	case cached == len(b.nodes):
		return "#c8c8c8"
	case cached > 0:
		return "#ececec"
	}
	return "#ffffff"
}

func (w window) String() string {
	if w.hi-w.lo == 1 {
		return fmt.Sprintf("layer %d", w.lo)
	}
	return fmt.Sprintf("layers %d-%d", w.lo, w.hi-1)
}

// sortedDeps returns a box's dependencies in the boxes' order.
func sortedDeps(b *box) []string {
	deps := make([]string, 0, len(b.deps))
	for d := range b.deps {
		deps = append(deps, d)
	}
	sort.Slice(deps, func(i, j int) bool { return atoi(deps[i][1:]) < atoi(deps[j][1:]) })
	return deps
}
