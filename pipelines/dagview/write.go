package dagview

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Options configure a drawing.
type Options struct {
	Title   string // the graph's caption (the target name)
	Group   bool   // group the nodes of a kind in a layer window (see the package doc)
	Explain bool   // colour and label by Node.State (explain) instead of Node.Cached (plan)
}

// caption is the graph's title line: the target and how many nodes are drawn in how many boxes.
func caption(o Options, nodes []Node, boxes []*box) string {
	c := fmt.Sprintf("%s: %d nodes", o.Title, len(nodes))
	if len(boxes) != len(nodes) {
		c += fmt.Sprintf(" in %d boxes", len(boxes))
	}
	return c
}

// WriteDOT writes the graph in Graphviz's DOT language (render with `dot -Tsvg`).
func WriteDOT(w io.Writer, nodes []Node, o Options) error {
	boxes, wins := layout(nodes, o.Group)
	bw := bufio.NewWriter(w)
	q := func(s string) string {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
	}
	fmt.Fprintf(bw, "digraph %s {\n", q(o.Title))
	fmt.Fprintf(bw, "  graph [rankdir=TB, newrank=true, compound=true, labelloc=t, fontname=\"Helvetica\", fontsize=14, label=%s];\n", q(caption(o, nodes, boxes)))
	fmt.Fprintf(bw, "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n")
	fmt.Fprintf(bw, "  edge [color=\"#666666\", arrowsize=0.6];\n")
	decl := func(indent string, b *box) {
		fmt.Fprintf(bw, "%s%s [label=%s, fillcolor=%s];\n", indent, b.id, q(strings.Join(b.label(o.Explain), "\n")), q(b.fill(o.Explain)))
	}
	declareAll(boxes, wins, decl, func(i int, w window) {
		fmt.Fprintf(bw, "  subgraph cluster_w%d {\n    label=%s; style=\"rounded\"; color=\"#999999\"; fontsize=11;\n", i, q(w.String()))
	}, func() { fmt.Fprintf(bw, "  }\n") })
	// Edges inside a window weigh more, so that dot keeps a window's boxes together. A box feeding
	// boxes in more than fanOut windows (the source model) gets one edge per window, to its cluster.
	byID := map[string]*box{}
	for _, b := range boxes {
		byID[b.id] = b
	}
	wide := wideSources(boxes, byID)
	drawn := map[[2]string]bool{}
	for _, b := range boxes {
		for _, d := range sortedDeps(b) {
			src := byID[d]
			switch {
			case wide[d] && b.window >= 0:
				key := [2]string{d, fmt.Sprint(b.window)}
				if !drawn[key] {
					drawn[key] = true
					fmt.Fprintf(bw, "  %s -> %s [lhead=cluster_w%d, color=\"#aaaaaa\"];\n", d, b.id, b.window)
				}
			case src.window >= 0 && src.window == b.window:
				fmt.Fprintf(bw, "  %s -> %s [weight=8];\n", d, b.id)
			default:
				fmt.Fprintf(bw, "  %s -> %s;\n", d, b.id)
			}
		}
	}
	fmt.Fprintf(bw, "}\n")
	return bw.Flush()
}

// fanOut is how many windows a box may feed before its edges are drawn once per window.
const fanOut = 3

// wideSources are the boxes feeding boxes in more than fanOut windows.
func wideSources(boxes []*box, byID map[string]*box) map[string]bool {
	windows := map[string]map[int]bool{}
	for _, b := range boxes {
		if b.window < 0 {
			continue
		}
		for d := range b.deps {
			if windows[d] == nil {
				windows[d] = map[int]bool{}
			}
			windows[d][b.window] = true
		}
	}
	wide := map[string]bool{}
	for d, ws := range windows {
		wide[d] = len(ws) > fanOut && byID[d].window < 0
	}
	return wide
}

// WriteMermaid writes the graph as a Mermaid flowchart.
func WriteMermaid(w io.Writer, nodes []Node, o Options) error {
	boxes, wins := layout(nodes, o.Group)
	bw := bufio.NewWriter(w)
	q := func(s string) string {
		return `"` + strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;", "\n", "<br/>").Replace(s) + `"`
	}
	fmt.Fprintf(bw, "---\ntitle: %s\n---\nflowchart TB\n", q(strings.ReplaceAll(caption(o, nodes, boxes), "\"", "'")))
	decl := func(indent string, b *box) {
		fmt.Fprintf(bw, "%s%s[%s]\n", indent, b.id, q(strings.Join(b.label(o.Explain), "\n")))
	}
	declareAll(boxes, wins, decl, func(i int, w window) { fmt.Fprintf(bw, "  subgraph w%d[%s]\n", i, q(w.String())) },
		func() { fmt.Fprintf(bw, "  end\n") })
	for _, b := range boxes {
		for _, d := range sortedDeps(b) {
			fmt.Fprintf(bw, "  %s --> %s\n", d, b.id)
		}
	}
	for _, b := range boxes {
		fmt.Fprintf(bw, "  style %s fill:%s\n", b.id, b.fill(o.Explain))
	}
	return bw.Flush()
}

// declareAll declares every box: those of each window between open and close of its cluster (a
// window without boxes is left out), then those of no window.
func declareAll(boxes []*box, wins []window, decl func(indent string, b *box), open func(int, window), close func()) {
	for i, w := range wins {
		var in []*box
		for _, b := range boxes {
			if b.window == i {
				in = append(in, b)
			}
		}
		if len(in) == 0 {
			continue
		}
		open(i, w)
		for _, b := range in {
			decl("    ", b)
		}
		close()
	}
	for _, b := range boxes {
		if b.window < 0 {
			decl("  ", b)
		}
	}
}
