package reporthtml

import (
	"fmt"
	"html/template"
	"math"
	"sort"
)

type diffRow struct {
	Label, A, B, Delta string
	Changed            bool
}

type changeRow struct {
	Name, DTypeA, DTypeB, QErrA, QErrB, Delta, BytesA, BytesB string
}

type diffPage struct {
	Title, LabelA, LabelB string
	Style                 template.CSS
	A, B                  *report
	Rows                  []diffRow
	PPL, CDF              template.HTML
	ScreenNote            string
	Heatmap               template.HTML
	OnlyA, OnlyB          []string
	Changes               []changeRow
	DomainsA, DomainsB    template.HTML
	Provenance            []diffRow
}

// RenderDiff returns the page comparing two builds from their report.json bytes; labelA and labelB
// say where each came from. Deltas are B − A.
func RenderDiff(a, b []byte, labelA, labelB string) ([]byte, error) {
	ra, err := parseReport(a)
	if err != nil {
		//lint:ignore ST1005 A names the first report, as the caller's usage does
		return nil, fmt.Errorf("A (%s): %w", labelA, err)
	}
	rb, err := parseReport(b)
	if err != nil {
		//lint:ignore ST1005 B names the second report, as the caller's usage does
		return nil, fmt.Errorf("B (%s): %w", labelB, err)
	}
	p := &diffPage{Title: ra.Name + " vs " + rb.Name + " — orkpipe", LabelA: labelA, LabelB: labelB, Style: template.CSS(style), A: ra, B: rb}
	p.Rows = sizeRows(ra, rb)
	p.screens(ra, rb)
	p.weights(ra, rb)
	p.DomainsA, _ = domainPlan(ra)
	p.DomainsB, _ = domainPlan(rb)
	p.Provenance = provenanceDiff(ra, rb)
	return execute("diff", p)
}

func intRow(label string, a, b int64, format func(int64) string) diffRow {
	d := b - a
	sign := ""
	if d > 0 {
		sign = "+"
	}
	delta := sign + format(d)
	if d < 0 {
		delta = "−" + format(-d)
	}
	return diffRow{label, format(a), format(b), delta, a != b}
}

func floatRow(label string, a, b float64, digits int) diffRow {
	f := func(x float64) string { return fmt.Sprintf("%.*f", digits, x) }
	return diffRow{label, f(a), f(b), fmt.Sprintf("%+.*f", digits, b-a), f(a) != f(b)}
}

func sizeRows(a, b *report) []diffRow {
	count := func(n int64) string { return fmt.Sprint(n) }
	return []diffRow{
		{"board", a.Board, b.Board, "", a.Board != b.Board},
		intRow("weights", int64(a.Totals.Weights), int64(b.Totals.Weights), count),
		intRow("pack size", a.Pack.Size, b.Pack.Size, sizeText),
		intRow("stub size", a.Stub.Size, b.Stub.Size, sizeText),
		intRow("resident bytes", a.Totals.Resident, b.Totals.Resident, sizeText),
		intRow("IOMMU domains used", int64(len(a.Domains)), int64(len(b.Domains)), count),
		floatRow("mean qerr", a.Totals.MeanQErr, b.Totals.MeanQErr, 5),
		floatRow("max qerr", a.Totals.MaxQErr, b.Totals.MaxQErr, 5),
	}
}

func (p *diffPage) screens(a, b *report) {
	sa, sb := a.Screen, b.Screen
	if sa == nil || sb == nil {
		p.ScreenNote = "Not compared: only builds that were both screened have screen figures."
		if sa == nil && sb == nil {
			p.ScreenNote = "Neither build was screened."
		}
		return
	}
	if sa.Ctx != sb.Ctx || sa.Tokens != sb.Tokens || sa.Chunks != sb.Chunks {
		p.ScreenNote = fmt.Sprintf("Screens differ (A: %d chunks of %d of a %d-token text; B: %d chunks of %d of a %d-token text): their figures are listed, not compared.",
			sa.Chunks, sa.Ctx, sa.Tokens, sb.Chunks, sb.Ctx, sb.Tokens)
	}
	p.Rows = append(p.Rows,
		floatRow("PPL pack", sa.PPL, sb.PPL, 4), floatRow("PPL float", sa.BasePPL, sb.BasePPL, 4),
		floatRow("PPL ratio", sa.PPLRatio, sb.PPLRatio, 4), floatRow("mean KL divergence", sa.KLDMean, sb.KLDMean, 6),
		floatRow("same top token (%)", 100*sa.SameTop, 100*sb.SameTop, 2))
	if sa.KLD != nil && sb.KLD != nil {
		p.Rows = append(p.Rows, floatRow("KLD median", sa.KLD.Median, sb.KLD.Median, 6), floatRow("KLD p99", sa.KLD.P99, sb.KLD.P99, 6))
	}
	f4 := func(x float64) string { return fmt.Sprintf("%.4f", x) }
	p.PPL = intervals([]interval{
		{"A float", sa.BasePPL, sa.BasePPLErr, "#4e79a7"}, {"A pack", sa.PPL, sa.PPLErr, "#4e79a7"},
		{"B float", sb.BasePPL, sb.BasePPLErr, "#f28e2b"}, {"B pack", sb.PPL, sb.PPLErr, "#f28e2b"},
	}, nil, 0, 0, f4, "perplexity of both builds")
	var series []cdfSeries
	if sa.KLD != nil && len(sa.KLDPct) == 101 {
		series = append(series, cdfSeries{"A", "#4e79a7", sa.KLDPct, sa.KLD.Mean})
	}
	if sb.KLD != nil && len(sb.KLDPct) == 101 {
		series = append(series, cdfSeries{"B", "#f28e2b", sb.KLDPct, sb.KLD.Mean})
	}
	if len(series) > 0 {
		p.CDF = kldCDF(series, 0, "cumulative distributions of the per-token KL divergence")
	}
}

// weights draws the qerr deltas of the entries both packs have, per layer and kind.
func (p *diffPage) weights(a, b *report) {
	inA, inB := map[string]weight{}, map[string]weight{}
	for _, w := range a.Weights {
		inA[w.Name] = w
	}
	for _, w := range b.Weights {
		inB[w.Name] = w
		if _, ok := inA[w.Name]; !ok {
			p.OnlyB = append(p.OnlyB, w.Name)
		}
	}
	var both []weight // B's entries present in A, with QErr replaced by the delta
	deltaOf := map[string]float64{}
	for _, w := range a.Weights {
		wb, ok := inB[w.Name]
		if !ok {
			p.OnlyA = append(p.OnlyA, w.Name)
			continue
		}
		deltaOf[w.Name] = wb.QErr - w.QErr
		d := wb
		d.QErr = wb.QErr - w.QErr
		both = append(both, d)
	}
	sorted := append([]weight(nil), both...)
	sort.SliceStable(sorted, func(i, j int) bool { return math.Abs(sorted[i].QErr) > math.Abs(sorted[j].QErr) })
	for _, d := range sorted[:min(20, len(sorted))] {
		wa, wb := inA[d.Name], inB[d.Name]
		p.Changes = append(p.Changes, changeRow{d.Name, wa.DType, wb.DType, fmt.Sprintf("%.5f", wa.QErr), fmt.Sprintf("%.5f", wb.QErr),
			fmt.Sprintf("%+.5f", d.QErr), sizeText(wa.Bytes), sizeText(wb.Bytes)})
	}
	g, _ := layoutGrid(both)
	if len(g.layers) == 0 {
		return
	}
	m := 0.0
	for _, d := range both {
		m = max(m, math.Abs(d.QErr))
	}
	if m == 0 {
		m = 1e-9
	}
	colour := func(v float64) rgb { return ramp(diverging, 0.5+v/(2*m)) }
	var cells []cell
	for _, k := range g.keys() {
		ws := g.cells[k]
		s := summarize(ws)
		changed := false
		title := ""
		for i, w := range ws {
			wa := inA[w.Name]
			changed = changed || wa.DType != w.DType
			if i < 4 {
				title += fmt.Sprintf("%s: A %s qerr %.5f, B %s qerr %.5f (%+.5f); ", w.Name, wa.DType, wa.QErr, w.DType, inB[w.Name].QErr, w.QErr)
			}
		}
		if len(ws) > 4 {
			title += fmt.Sprintf("… %d entries, mean delta %+.5f", len(ws), s.mean)
		}
		cells = append(cells, cell{row: k[0], col: k[1], fill: colour(s.mean), label: fmt.Sprintf("%+.4f", s.mean), stripe: dtypeColour(s.dtypes[0]), marked: changed, title: title})
	}
	p.Heatmap = heatmap(g.rowLabels(), g.kinds, cells, legend{"qerr B − A", -m, m, colour}, "qerr deltas per layer and weight")
}

// depDigest is a dependency's BLAKE3 (or "") by name.
func depDigest(r *report, name string) (string, string) {
	if r.Provenance == nil {
		return "", ""
	}
	for _, d := range r.Provenance.Deps {
		if d.Name == name {
			return d.URI, d.Digest["blake3"]
		}
	}
	return "", ""
}

func provenanceDiff(a, b *report) []diffRow {
	rows := []diffRow{
		{"pack", a.Pack.Digest, b.Pack.Digest, "", a.Pack.Digest != b.Pack.Digest},
		{"stub", a.Stub.Digest, b.Stub.Digest, "", a.Stub.Digest != b.Stub.Digest},
	}
	var names []string
	seen := map[string]bool{}
	for _, r := range []*report{a, b} {
		if r.Provenance == nil {
			continue
		}
		for _, d := range r.Provenance.Deps {
			if !seen[d.Name] {
				seen[d.Name] = true
				names = append(names, d.Name)
			}
		}
	}
	for _, n := range names {
		ua, da := depDigest(a, n)
		ub, db := depDigest(b, n)
		rows = append(rows, diffRow{n, ua + " " + da, ub + " " + db, "", ua != ub || da != db})
	}
	return rows
}
