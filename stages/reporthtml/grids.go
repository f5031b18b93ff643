package reporthtml

import (
	"fmt"
	"html/template"
	"slices"
	"sort"
	"strings"
)

// grid is the layout of entries on (layer, kind) cells.
type grid struct {
	layers []int
	kinds  []string
	cells  map[[2]int][]weight // [row, col] -> entries (several for expert slices)
}

func layoutGrid(ws []weight) (grid, []weight) {
	g := grid{cells: map[[2]int][]weight{}}
	var outside []weight
	layerSeen, kindCol := map[int]bool{}, map[string]int{}
	for _, w := range ws {
		s := slotOf(w.Name)
		if !s.ok {
			outside = append(outside, w)
			continue
		}
		if !layerSeen[s.layer] {
			layerSeen[s.layer] = true
			g.layers = append(g.layers, s.layer)
		}
		if _, ok := kindCol[s.kind]; !ok {
			kindCol[s.kind] = len(g.kinds)
			g.kinds = append(g.kinds, s.kind)
		}
	}
	sort.Ints(g.layers)
	row := map[int]int{}
	for i, l := range g.layers {
		row[l] = i
	}
	for _, w := range ws {
		if s := slotOf(w.Name); s.ok {
			k := [2]int{row[s.layer], kindCol[s.kind]}
			g.cells[k] = append(g.cells[k], w)
		}
	}
	return g, outside
}

func (g grid) rowLabels() []string {
	out := make([]string, len(g.layers))
	for i, l := range g.layers {
		out[i] = fmt.Sprintf("blk %d", l)
	}
	return out
}

// keys returns the grid's cells in row-major order.
func (g grid) keys() [][2]int {
	var out [][2]int
	for k := range g.cells {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}

// summary aggregates the entries of one cell: mean and max qerr, total bytes, dtypes, promotion.
type summary struct {
	mean, max  float64
	bytes, res int64
	dtypes     []string
	promoted   bool
	first      weight
}

func summarize(ws []weight) summary {
	s := summary{first: ws[0]}
	for _, w := range ws {
		s.mean += w.QErr / float64(len(ws))
		s.max = max(s.max, w.QErr)
		s.bytes += w.Bytes
		s.res += w.Resident
		if !slices.Contains(s.dtypes, w.DType) {
			s.dtypes = append(s.dtypes, w.DType)
		}
		s.promoted = s.promoted || w.PromotedFrom != ""
	}
	return s
}

func weightTitle(ws []weight) string {
	s := summarize(ws)
	w := s.first
	if len(ws) == 1 {
		t := fmt.Sprintf("%s: %s", w.Name, w.DType)
		if w.PromotedFrom != "" {
			t += " (promoted from " + w.PromotedFrom + ")"
		}
		return t + fmt.Sprintf(", %d × %d, group %d, %s, a%d clip %.4g; qerr %.5f; %s (%s resident) in domain %d",
			w.N, w.K, w.Group, w.Rotation, w.ActBits, w.ActClip, w.QErr, sizeText(w.Bytes), sizeText(w.Resident), w.Domain)
	}
	base, _, _ := strings.Cut(w.Name, "#")
	return fmt.Sprintf("%s: %d expert slices, %s; qerr mean %.5f, max %.5f; %s (%s resident)",
		base, len(ws), strings.Join(s.dtypes, "/"), s.mean, s.max, sizeText(s.bytes), sizeText(s.res))
}

// qerrHeatmap draws the entries' qerr per layer and weight kind; entries outside the blocks are returned.
func qerrHeatmap(ws []weight) (template.HTML, []weightRow) {
	g, outside := layoutGrid(ws)
	var rows []weightRow
	for _, w := range outside {
		rows = append(rows, rowOf(w))
	}
	if len(g.layers) == 0 {
		return "", rows
	}
	lo, hi := 0.0, 0.0
	for i, k := range g.keys() {
		m := summarize(g.cells[k]).mean
		if i == 0 || m < lo {
			lo = m
		}
		hi = max(hi, m)
	}
	colour := func(v float64) rgb {
		if hi <= lo {
			return ramp(heat, 0.5)
		}
		return ramp(heat, (v-lo)/(hi-lo))
	}
	var cells []cell
	caption := "qerr"
	for _, k := range g.keys() {
		if len(g.cells[k]) > 1 {
			caption = "qerr (mean over a cell's expert slices)"
		}
		s := summarize(g.cells[k])
		cells = append(cells, cell{row: k[0], col: k[1], fill: colour(s.mean), label: fmt.Sprintf("%.4f", s.mean),
			stripe: dtypeColour(s.dtypes[0]), marked: s.promoted, title: weightTitle(g.cells[k])})
	}
	return heatmap(g.rowLabels(), g.kinds, cells, legend{caption, lo, hi, colour}, "quantization error per layer and weight"), rows
}

func dtypeCounts(r *report) []dtypeCount {
	counts := map[string]int{}
	for _, w := range r.Weights {
		counts[w.DType]++
	}
	var out []dtypeCount
	for dt, n := range counts {
		out = append(out, dtypeCount{dt, dtypeColour(dt), n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// domainBars are the domains of r as bars of their entries' resident bytes.
func domainBars(r *report) []bar {
	var bs []bar
	for _, d := range r.Domains {
		b := bar{label: fmt.Sprintf("domain %d", d.Domain)}
		for _, w := range r.Weights {
			if w.Domain == d.Domain {
				b.segments = append(b.segments, segment{w.Resident, dtypeColour(w.DType), fmt.Sprintf("%s: %s, %s resident", w.Name, w.DType, sizeText(w.Resident))})
			}
		}
		b.note = fmt.Sprintf("%s, %d entries", sizeText(d.Resident), d.Entries)
		if r.DomainCapacity > 0 {
			b.note = fmt.Sprintf("%s of %s (%.1f%%), %d entries", sizeText(d.Resident), sizeText(r.DomainCapacity), 100*float64(d.Resident)/float64(r.DomainCapacity), d.Entries)
		}
		bs = append(bs, b)
	}
	return bs
}

// domainPlan draws the domains against their capacity and, when the fullest is under a twentieth
// of it (the fills would be slivers), again scaled to the fullest domain.
func domainPlan(r *report) (template.HTML, string) {
	note := fmt.Sprintf("%d of %d domains used, %s resident in all. Each bar is one domain, filled by its entries (colour: dtype; hover for the entry) against what one domain holds, %s (the board profile's ceiling less its headroom).",
		len(r.Domains), r.Verify.MaxDomains, sizeText(r.Totals.Resident), sizeText(r.DomainCapacity))
	if r.DomainCapacity == 0 {
		note = fmt.Sprintf("%d of %d domains used, %s resident in all. This report.json does not record a domain's capacity (domain_capacity_bytes): the bars are scaled to the fullest domain.",
			len(r.Domains), r.Verify.MaxDomains, sizeText(r.Totals.Resident))
	}
	bs := domainBars(r)
	out := bars(bs, r.DomainCapacity, "IOMMU domain plan")
	var fullest int64
	for _, d := range r.Domains {
		fullest = max(fullest, d.Resident)
	}
	if r.DomainCapacity > 0 && fullest*20 < r.DomainCapacity {
		note += fmt.Sprintf(" The fullest domain holds %.2f%% of that: the second view is scaled to it.", 100*float64(fullest)/float64(r.DomainCapacity))
		out += bars(bs, fullest, "IOMMU domain plan, scaled to the fullest domain")
	}
	return out, note
}

// maxExperts is llama.cpp's LLAMA_MAX_EXPERTS (src/llama-hparams.h): the most experts a block of a
// model it loads has.
const maxExperts = 1024

// expertGrid draws, for an MoE pack, each layer's experts: their size and qerr, or their share of
// the layer's routing when report.json has routing counts.
func expertGrid(r *report) (template.HTML, string) {
	type key struct{ layer, expert int }
	cells := map[key][]weight{}
	var layers, experts []int
	seenLayer, seenExpert := map[int]bool{}, map[int]bool{}
	for _, w := range r.Weights {
		s := slotOf(w.Name)
		if !s.ok || s.expert < 0 {
			continue
		}
		k := key{s.layer, s.expert}
		if !seenLayer[s.layer] {
			seenLayer[s.layer] = true
			layers = append(layers, s.layer)
		}
		cells[k] = append(cells[k], w)
		if !seenExpert[s.expert] {
			seenExpert[s.expert] = true
			experts = append(experts, s.expert)
		}
	}
	if len(cells) == 0 {
		return "", ""
	}
	sort.Ints(layers)
	// A column per expert index up to the largest (an expert the pack does not hold shows as an empty
	// column), unless that is more than any model llama.cpp loads has experts: then a column per
	// expert a weight names, so that a report.json pulled from a registry sizes nothing by a number in
	// it (a name's "#2000000000" allocated 32 GB of column labels).
	sort.Ints(experts)
	if top := experts[len(experts)-1]; top < maxExperts {
		experts = experts[:0]
		for e := 0; e <= top; e++ {
			experts = append(experts, e)
		}
	}
	routed := map[int][]int64{}
	for _, rt := range r.Routing {
		routed[rt.Layer] = rt.Counts
	}
	share := func(l, e int) (float64, int64, bool) {
		c, ok := routed[l]
		if !ok || e >= len(c) {
			return 0, 0, false
		}
		var sum int64
		for _, v := range c {
			sum += v
		}
		if sum == 0 {
			return 0, c[e], true
		}
		return float64(c[e]) / float64(sum), c[e], true
	}
	var lo, hi float64
	first := true
	for k, ws := range cells {
		v := summarize(ws).mean
		if len(r.Routing) > 0 {
			v, _, _ = share(k.layer, k.expert)
		}
		if first || v < lo {
			lo = v
		}
		hi, first = max(hi, v), false
	}
	colour := func(v float64) rgb {
		if hi <= lo {
			return ramp(heat, 0.5)
		}
		return ramp(heat, (v-lo)/(hi-lo))
	}
	cols := make([]string, len(experts))
	for i, e := range experts {
		cols[i] = fmt.Sprintf("e%d", e)
	}
	rows := make([]string, len(layers))
	var out []cell
	for i, l := range layers {
		rows[i] = fmt.Sprintf("blk %d", l)
		for col, e := range experts {
			ws := cells[key{l, e}]
			if len(ws) == 0 {
				continue
			}
			s := summarize(ws)
			names := make([]string, len(ws))
			for j, w := range ws {
				names[j] = fmt.Sprintf("%s %s qerr %.5f %s", slotOf(w.Name).kind, w.DType, w.QErr, sizeText(w.Bytes))
			}
			title := fmt.Sprintf("blk %d expert %d: %s in all; %s", l, e, sizeText(s.bytes), strings.Join(names, "; "))
			c := cell{row: i, col: col, fill: colour(s.mean), label: sizeText(s.bytes), stripe: dtypeColour(s.dtypes[0]), title: title}
			if f, n, ok := share(l, e); ok {
				c.fill, c.label = colour(f), percentText(f)
				c.title += fmt.Sprintf("; routed %d tokens (%s of the layer's)", n, percentText(f))
			} else if len(r.Routing) > 0 {
				c.fill = rgb{235, 235, 235}
				c.title += "; no routing counts for this layer"
			}
			out = append(out, c)
		}
	}
	caption, note := "qerr (mean over the expert's slices)",
		fmt.Sprintf("%d expert slices of %d MoE tensors. Each cell is one expert of one layer: its slices' total size (label) and mean qerr (colour). This report.json has no routing counts.",
			r.Totals.ExpertEntries, r.Totals.ExpertTensors)
	if len(r.Routing) > 0 {
		caption = "share of the layer's routed tokens"
		note = fmt.Sprintf("%d expert slices of %d MoE tensors. Each cell is one expert of one layer, coloured and labelled by its share of the tokens the layer's router sent to experts; hover for its size and qerr.",
			r.Totals.ExpertEntries, r.Totals.ExpertTensors)
	}
	return heatmap(rows, cols, out, legend{caption, lo, hi, colour}, "experts per layer"), note
}
