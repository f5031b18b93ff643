package reporthtml

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
)

//go:embed style.css
var style string

//go:embed templates.html
var templateText string

// pages parses the templates on first use, not at package init (every orkpipe command links this
// package; parsing took ~0.3 ms of each one's start).
var pages = sync.OnceValue(func() *template.Template { return template.Must(template.New("pages").Parse(templateText)) })

// fact is one figure of the summary grid.
type fact struct{ Label, Value string }

// weightRow is one entry in a weights table.
type weightRow struct {
	Name, DType, PromotedFrom, Shape, Rotation, RotationShort, Act, QErr, Bytes, Resident string
	Group, Domain                                                                         int
}

func rowOf(w weight) weightRow {
	act := fmt.Sprintf("a%d", w.ActBits)
	if w.ActClip > 0 && w.ActClip < 1 {
		act += fmt.Sprintf(", clip %.4g", w.ActClip)
	}
	return weightRow{Name: w.Name, DType: w.DType, PromotedFrom: w.PromotedFrom, Shape: fmt.Sprintf("%d × %d", w.N, w.K),
		Rotation: w.Rotation, RotationShort: rotationShort(w.Rotation), Act: act, QErr: fmt.Sprintf("%.5f", w.QErr), Bytes: sizeText(w.Bytes), Resident: sizeText(w.Resident),
		Group: w.Group, Domain: w.Domain}
}

// rotationShort drops the seed from a rotation ("hadamard(block=64,seed=…)" -> "hadamard, block 64").
func rotationShort(r string) string {
	name, args, ok := strings.Cut(strings.TrimSuffix(r, ")"), "(")
	if !ok {
		return r
	}
	var keep []string
	for _, a := range strings.Split(args, ",") {
		if k, v, _ := strings.Cut(a, "="); k != "seed" {
			keep = append(keep, k+" "+v)
		}
	}
	if len(keep) == 0 {
		return name
	}
	return name + ", " + strings.Join(keep, ", ")
}

type dtypeCount struct {
	Name, Colour string
	Count        int
}

type screenView struct {
	Intro                              string
	Facts                              []fact
	PPL, SameTop, CDF                  template.HTML
	KLDMean, KLDMedian, KLDP99, KLDMax string
}

type provRow struct{ What, Where, Digest, Details string }

type reportPage struct {
	Title        string
	Model        string // ModelLine of report.json's model, "" without one
	Style        template.CSS
	R            *report
	Facts        []fact
	Screen       *screenView
	Heatmap      template.HTML
	DTypes       []dtypeCount
	Promoted     int // entries promoted to their wider tier
	Outside      []weightRow
	Worst, All   []weightRow
	Domains      template.HTML
	DomainNote   string
	Experts      template.HTML
	ExpertNote   string
	Provenance   []provRow
	TimelineFile string
	Overrides    []string
}

// Render returns report.html for the bytes of a report.json. The same bytes give the same page.
func Render(reportJSON []byte) ([]byte, error) {
	r, err := parseReport(reportJSON)
	if err != nil {
		return nil, err
	}
	p := &reportPage{Title: r.Name + " — orkpipe build report", Style: template.CSS(style), R: r, TimelineFile: TimelineFile}
	p.Facts = []fact{}
	if m := r.Model; m != nil {
		p.Model = ModelLine(m.Name, "", m.Architecture, m.ParamSize, m.Precision, m.Quantization)
		if m.License != "" {
			p.Facts = append(p.Facts, fact{"model license", m.License})
		}
	}
	p.Facts = append(p.Facts, []fact{
		{"weights in the pack", fmt.Sprint(r.Totals.Weights)},
		{"pack on disk", sizeText(r.Pack.Size)},
		{"resident on " + r.Board, sizeText(r.Totals.Resident)},
		{"IOMMU domains used", fmt.Sprintf("%d of %d", len(r.Domains), r.Verify.MaxDomains)},
		{"mean qerr", fmt.Sprintf("%.5f", r.Totals.MeanQErr)},
		{"max qerr", fmt.Sprintf("%.5f", r.Totals.MaxQErr)},
	}...)
	if n := r.NextN; n != nil {
		blocks := make([]string, len(n.Blocks))
		for i, l := range n.Blocks {
			blocks[i] = fmt.Sprintf("blk.%d", l)
		}
		p.Facts = append(p.Facts, fact{"not packed (multi-token prediction)",
			fmt.Sprintf("%s: %d tensors, %s, kept in the stub as stored", strings.Join(blocks, ", "), n.Tensors, sizeText(n.Bytes))})
	}
	if s := r.Screen; s != nil {
		p.Facts = append(p.Facts, fact{"PPL pack / float", fmt.Sprintf("%.4f", s.PPLRatio)}, fact{"mean KL divergence", fmt.Sprintf("%.6f", s.KLDMean)})
		p.Screen = screenOf(s)
	}
	p.Heatmap, p.Outside = qerrHeatmap(r.Weights)
	p.DTypes = dtypeCounts(r)
	for _, w := range r.Weights {
		p.Promoted += min(len(w.PromotedFrom), 1)
	}
	for _, w := range r.Weights {
		p.All = append(p.All, rowOf(w))
	}
	worst := append([]weight(nil), r.Weights...)
	sort.SliceStable(worst, func(i, j int) bool { return worst[i].QErr > worst[j].QErr })
	for _, w := range worst[:min(10, len(worst))] {
		p.Worst = append(p.Worst, rowOf(w))
	}
	p.Domains, p.DomainNote = domainPlan(r)
	p.Experts, p.ExpertNote = expertGrid(r)
	p.Provenance, p.Overrides = provenanceRows(r)
	return execute("report", p)
}

// execute runs one page template and checks the page it wrote (Check).
func execute(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := pages().ExecuteTemplate(&b, name, data); err != nil {
		return nil, err
	}
	if err := Check(b.Bytes()); err != nil {
		return nil, fmt.Errorf("internal: the %s page: %w", name, err)
	}
	return b.Bytes(), nil
}

func screenOf(s *screen) *screenView {
	v := &screenView{Intro: fmt.Sprintf("Every entry emulated with the board's arithmetic, against the float source model: %d chunks of %d tokens (%d tokens scored of %d).",
		s.Chunks, s.Ctx, s.Scored, s.Tokens)}
	var gates []string
	var marks []marker
	if g := s.Gates.MaxPPLRatio; g > 0 {
		gates = append(gates, fmt.Sprintf("PPL ratio ≤ %g", g))
		marks = append(marks, marker{s.BasePPL * g, fmt.Sprintf("gate: %g × float", g)})
	}
	if g := s.Gates.MaxKLDMean; g > 0 {
		gates = append(gates, fmt.Sprintf("mean KLD ≤ %g", g))
	}
	gate := "none set"
	if len(gates) > 0 {
		gate = "passed: " + strings.Join(gates, ", ")
	}
	v.Facts = []fact{
		{"PPL pack", fmt.Sprintf("%.4f ± %.4f", s.PPL, s.PPLErr)},
		{"PPL float", fmt.Sprintf("%.4f ± %.4f", s.BasePPL, s.BasePPLErr)},
		{"PPL ratio", fmt.Sprintf("%.4f", s.PPLRatio)},
		{"same top token", percentText(s.SameTop)},
		{"gates", gate},
	}
	f4 := func(x float64) string { return fmt.Sprintf("%.4f", x) }
	v.PPL = intervals([]interval{{"float model", s.BasePPL, s.BasePPLErr, "#4e79a7"}, {"pack", s.PPL, s.PPLErr, "#e15759"}}, marks, 0, 0, f4, "perplexity of the pack and of the float model")
	stErr := 0.0
	if s.SameTopErr != nil {
		stErr = *s.SameTopErr
	}
	v.SameTop = intervals([]interval{{"pack", s.SameTop, stErr, "#59a14f"}}, nil, 0, 1, func(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }, "same top token rate")
	if k := s.KLD; k != nil {
		v.KLDMean, v.KLDMedian, v.KLDP99, v.KLDMax = short(k.Mean), short(k.Median), short(k.P99), short(k.Max)
		v.Facts = append(v.Facts, fact{"KLD mean", fmt.Sprintf("%.6f ± %.6f", k.Mean, k.MeanErr)}, fact{"KLD median", short(k.Median)},
			fact{"KLD p99", short(k.P99)}, fact{"KLD max", short(k.Max)})
		if len(s.KLDPct) == 101 {
			v.CDF = kldCDF([]cdfSeries{{"pack vs float", "#e15759", s.KLDPct, k.Mean}}, s.Gates.MaxKLDMean, "cumulative distribution of the per-token KL divergence")
		}
	}
	return v
}

// annotationText lists a dependency's annotations as "key value" pairs in key order.
func annotationText(a map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		v := fmt.Sprint(a[k])
		if k == "size" {
			var n int64
			if _, err := fmt.Sscan(v, &n); err == nil {
				v = sizeText(n)
			}
		}
		parts = append(parts, k+" "+v)
	}
	return strings.Join(parts, ", ")
}

func provenanceRows(r *report) ([]provRow, []string) {
	rows := []provRow{
		{"pack", r.Name + ".orkpack", r.Pack.Digest, sizeText(r.Pack.Size) + fmt.Sprintf(", %d entries, index %s", r.Verify.PackEntries, shortDigest(r.Verify.PackIndex))},
		{"stub GGUF", r.Name + ".orkpack.gguf", r.Stub.Digest, sizeText(r.Stub.Size) + fmt.Sprintf(", %d tensors (%d owned by the pack), source header %s", r.Verify.StubTensors, r.Verify.StubOwned, shortDigest(r.Verify.StubHeader))},
	}
	if r.Provenance == nil {
		return rows, nil
	}
	for _, d := range r.Provenance.Deps {
		var digests []string
		for _, alg := range []string{"blake3", "sha256"} {
			if v := d.Digest[alg]; v != "" {
				digests = append(digests, alg+":"+v)
			}
		}
		rows = append(rows, provRow{d.Name, d.URI, strings.Join(digests, " "), annotationText(d.Annotations)})
	}
	return rows, r.Provenance.Overrides
}
