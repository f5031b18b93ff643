package reporthtml

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"time"
)

// TimelineFile is the file `orkpipe build` writes the timeline of its run to, in the output
// directory. Hidden, so that `orkpipe push` (which publishes the directory's other files) leaves it
// out: it differs on every run, and would change the artifact of identical outputs.
const TimelineFile = ".orkpipe-timeline.html"

// Timeline is one run of the engine, as its events tell it: the nodes that executed, with their
// start, end and declared peak memory, and the counts of the others.
type Timeline struct {
	Target                            string
	Start                             time.Time     // when the run started
	Duration                          time.Duration // the whole run
	Jobs                              int           // job slots (-j)
	Budget                            int64         // memory budget in bytes (--mem)
	Nodes                             []TimedNode   // executed (or failed) nodes
	Executed, Cached, Failed, Skipped int
	Error                             string // the build's error, if it failed
}

// TimedNode is one node that ran: offsets from Timeline.Start.
type TimedNode struct {
	ID, Stage  string
	Start, End time.Duration
	Mem        int64 // declared peak memory in bytes
	Failed     bool
}

type stageRow struct {
	Name, Colour, Total, Longest, LongestNode, Mem string
	Nodes                                          int
}

type timelinePage struct {
	Title, Started, Took, Budget string
	Style                        template.CSS
	T                            *Timeline
	Gantt, Memory                template.HTML
	Stages                       []stageRow
}

// RenderTimeline returns the timeline page of one run. The same Timeline gives the same bytes.
func RenderTimeline(t *Timeline) ([]byte, error) {
	if t == nil || t.Target == "" {
		return nil, fmt.Errorf("timeline: no target")
	}
	for _, n := range t.Nodes {
		if n.End < n.Start || n.Start < 0 || n.ID == "" {
			return nil, fmt.Errorf("timeline of %s: node %q: start %v, end %v: want a named node with 0 <= start <= end", t.Target, n.ID, n.Start, n.End)
		}
	}
	p := &timelinePage{Title: "Build timeline: " + t.Target, Style: template.CSS(style), T: t,
		Started: t.Start.UTC().Format("2006-01-02 15:04:05 UTC"), Took: durText(t.Duration), Budget: sizeText(t.Budget)}
	nodes := append([]TimedNode(nil), t.Nodes...)
	sort.SliceStable(nodes, func(i, j int) bool {
		if nodes[i].Start != nodes[j].Start {
			return nodes[i].Start < nodes[j].Start
		}
		return nodes[i].ID < nodes[j].ID
	})
	colours := map[string]string{}
	for _, n := range nodes {
		if _, ok := colours[n.Stage]; !ok {
			colours[n.Stage] = categorical[len(colours)%len(categorical)]
		}
	}
	if len(nodes) > 0 {
		span := t.Duration
		for _, n := range nodes {
			span = max(span, n.End)
		}
		p.Gantt = gantt(nodes, colours, span)
		p.Memory = memoryChart(nodes, span, t.Budget)
		p.Stages = stageRows(nodes, colours)
	}
	return execute("timeline", p)
}

func durText(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

// lanes assigns each node (sorted by start) the lowest lane free at its start.
func lanes(nodes []TimedNode) ([]int, int) {
	var ends []time.Duration
	out := make([]int, len(nodes))
	for i, n := range nodes {
		lane := -1
		for l, e := range ends {
			if e <= n.Start {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(ends)
			ends = append(ends, 0)
		}
		ends[lane] = n.End
		out[i] = lane
	}
	return out, len(ends)
}

// timeAxis draws the time grid under a plot spanning [0, span] on x in [left, left+w].
func timeAxis(c *canvas, left, w, top, bottom float64, span time.Duration) {
	s := span.Seconds()
	for _, t := range niceTicks(0, s, 8) {
		x := left + w*t/math.Max(s, 1e-9)
		c.line(x, top, x, bottom, "grid")
		c.text(x, bottom+14, "middle", "small", durText(time.Duration(t*float64(time.Second))))
	}
	c.line(left, bottom, left+w, bottom, "axis")
}

func gantt(nodes []TimedNode, colours map[string]string, span time.Duration) template.HTML {
	const left, right, laneH = 70.0, 20.0, 18.0
	lane, n := lanes(nodes)
	w := pageWidth - left - right
	h := float64(n)*laneH + 8
	c := newCanvas(pageWidth, h+24)
	x := func(d time.Duration) float64 { return left + w*d.Seconds()/math.Max(span.Seconds(), 1e-9) }
	timeAxis(c, left, w, 4, h, span)
	for l := 0; l < n; l++ {
		c.text(left-6, 4+float64(l)*laneH+laneH/2+3, "end", "small", fmt.Sprintf("slot %d", l+1))
	}
	for i, nd := range nodes {
		y := 4 + float64(lane[i])*laneH
		class := ""
		if nd.Failed {
			class = "failed"
		}
		bw := math.Max(x(nd.End)-x(nd.Start), 1)
		c.rect(x(nd.Start), y+2, bw, laneH-4, colours[nd.Stage], class,
			fmt.Sprintf("%s (%s): %s, from %s to %s, declared %s", nd.ID, nd.Stage, durText(nd.End-nd.Start), durText(nd.Start), durText(nd.End), sizeText(nd.Mem)))
		if bw > float64(len(nd.ID))*5.6+6 {
			c.fillText(x(nd.Start)+3, y+laneH/2+3, "start", "#ffffff", "tiny", nd.ID)
		}
	}
	return c.html("nodes over time")
}

// memoryChart draws the sum of the running nodes' declared memory as a step area, and the budget.
func memoryChart(nodes []TimedNode, span time.Duration, budget int64) template.HTML {
	const left, right, top, plotH = 70.0, 20.0, 18.0, 160.0
	type edge struct {
		at  time.Duration
		mem int64
	}
	var edges []edge
	var peak int64
	for _, n := range nodes {
		edges = append(edges, edge{n.Start, n.Mem}, edge{n.End, -n.Mem})
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].mem < edges[j].mem // ends before starts at the same instant
	})
	w := pageWidth - left - right
	x := func(d time.Duration) float64 { return left + w*d.Seconds()/math.Max(span.Seconds(), 1e-9) }
	var cur int64
	steps := []struct {
		at  time.Duration
		mem int64
	}{{0, 0}}
	for _, e := range edges {
		cur += e.mem
		peak = max(peak, cur)
		steps = append(steps, struct {
			at  time.Duration
			mem int64
		}{e.at, cur})
	}
	// The axis reaches the budget unless that would flatten the area (budget above 4x the peak).
	top2 := float64(max(peak, budget))
	offChart := budget > 4*peak
	if offChart {
		top2 = float64(peak) * 1.15
	}
	if top2 <= 0 {
		top2 = 1
	}
	y := func(m int64) float64 { return top + plotH*(1-float64(m)/top2) }
	c := newCanvas(pageWidth, top+plotH+24)
	unit := float64(1 << 20)
	if top2 >= 1<<30 {
		unit = 1 << 30
	}
	for _, t := range niceTicks(0, top2/unit, 4) {
		m := int64(t * unit)
		c.line(left, y(m), left+w, y(m), "grid")
		c.text(left-6, y(m)+4, "end", "small", sizeText(m))
	}
	timeAxis(c, left, w, top, top+plotH, span)
	pts := []float64{x(0), y(0)}
	prev := int64(0)
	for _, s := range steps {
		pts = append(pts, x(s.at), y(prev), x(s.at), y(s.mem))
		prev = s.mem
	}
	pts = append(pts, x(span), y(prev), x(span), y(0))
	var b []byte
	for i := 0; i+1 < len(pts); i += 2 {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, num(pts[i])+","+num(pts[i+1])...)
	}
	fmt.Fprintf(&c.b, `<polygon points="%s" class="mem"><title>peak declared %s of %s</title></polygon>`, b, esc(sizeText(peak)), esc(sizeText(budget)))
	switch {
	case offChart:
		c.text(left+w-4, top-6, "end", "small", fmt.Sprintf("budget %s: off the chart (the peak is %.1f%% of it)", sizeText(budget), 100*float64(peak)/float64(budget)))
	case budget > 0:
		c.line(left, y(budget), left+w, y(budget), "gate")
		c.text(left+w-4, y(budget)-4, "end", "small", "budget "+sizeText(budget))
	}
	return c.html("declared memory over time")
}

func stageRows(nodes []TimedNode, colours map[string]string) []stageRow {
	type agg struct {
		n       int
		total   time.Duration
		longest TimedNode
		mem     int64
	}
	by := map[string]*agg{}
	var order []string
	for _, n := range nodes {
		a := by[n.Stage]
		if a == nil {
			a = &agg{}
			by[n.Stage] = a
			order = append(order, n.Stage)
		}
		a.n++
		d := n.End - n.Start
		a.total += d
		if a.n == 1 || d > a.longest.End-a.longest.Start {
			a.longest = n
		}
		a.mem = max(a.mem, n.Mem)
	}
	var out []stageRow
	for _, s := range order {
		a := by[s]
		out = append(out, stageRow{Name: s, Colour: colours[s], Nodes: a.n, Total: durText(a.total), Longest: durText(a.longest.End - a.longest.Start),
			LongestNode: a.longest.ID, Mem: sizeText(a.mem)})
	}
	return out
}
