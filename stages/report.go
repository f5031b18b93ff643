package stages

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"orkpipe/ork/pack"
	"orkpipe/stages/reporthtml"
)

// ReportParams are the parameters of "report": the build name, whether a screen result is bound
// (input "screen"), the board profile (Board, a built-in name; "" binds the profile file as input
// "board", as for verify-local), the promotion candidates with their base dtype (an entry whose
// pack dtype differs was promoted), and for provenance at a glance the build's resolved
// dependencies (inputs "dep.<name>", as for provenance) and its --set overrides. The orkpipe binary
// is the tool "orkpipe" (report.html is drawn by it, and report.json names it).
type ReportParams struct {
	Name        string            `json:"name"`
	Screen      bool              `json:"screen"`
	Board       string            `json:"board"`
	PromoteFrom map[string]string `json:"promote_from,omitempty"`
	Deps        []ProvenanceDep   `json:"deps,omitempty"`
	Overrides   []string          `json:"overrides,omitempty"`
	// An MoE build's routing statistics (input "routing", routing.json), its residency plan (input
	// "residency", residency.json) and the routing of the held-out text HeldOut names (input "held-out").
	Routing   bool   `json:"routing,omitempty"`
	Residency bool   `json:"residency,omitempty"`
	HeldOut   string `json:"held_out,omitempty"`
	// Model describes the packed model, as the provenance does (ProvenanceModel; the recipe digest is
	// the provenance's alone): written to report.json's "model" and the summary's second line.
	Model *ProvenanceModel `json:"model,omitempty"`
	// NextN lists the source's multi-token-prediction blocks (ModelShape.NextN), whose tensors the
	// pack never holds: written to report.json's "nextn" and a line of the summary.
	NextN *ReportNextN `json:"nextn,omitempty"`
}

// ReportNextN is what a source's multi-token-prediction blocks (qwen35's nextn_predict_layers; llama.cpp
// runs them only to draft tokens for speculative decoding) hold: their tensors stay in the stub as
// stored, neither packed nor calibrated nor screened.
type ReportNextN struct {
	Blocks  []int `json:"blocks"`  // their block numbers (blk.N)
	Tensors int   `json:"tensors"` // their tensors
	Bytes   int64 `json:"bytes"`   // those tensors' data in the source
}

// Report is the "report.json" output; report.html draws it (package stages/reporthtml, which reads
// these fields by their JSON names). DomainCapacity is what one IOMMU domain holds (the profile's
// ceiling less its headroom); Provenance lists the resolved dependencies (last: the orkpipe binary).
type Report struct {
	Name           string           `json:"name"`
	Pack           ReportFile       `json:"pack"`
	Stub           ReportFile       `json:"stub"`
	Board          string           `json:"board"`
	DomainCapacity int64            `json:"domain_capacity_bytes"`
	Domains        []ReportDomain   `json:"domains"`
	Totals         ReportTotals     `json:"totals"`
	Weights        []ReportWeight   `json:"weights"`
	Screen         *ScreenResult    `json:"screen,omitempty"`
	Verify         VerifyResult     `json:"verify"`
	Provenance     ReportProvenance `json:"provenance"`
	// Routing lists an MoE build's calibration routing per block (report.html colours its expert grid by
	// it); RoutingStats is its skew, Residency the pack's residency plan.
	Routing      []ReportRoutingLayer `json:"routing,omitempty"`
	RoutingStats *ReportRouting       `json:"routing_stats,omitempty"`
	Residency    *ReportResidency     `json:"residency,omitempty"`
	// Model is what the source's header says of the model and what the pack made of it (ReportParams).
	Model *ProvenanceModel `json:"model,omitempty"`
	// NextN is the source's multi-token-prediction blocks, kept in the stub as stored (ReportParams).
	NextN *ReportNextN `json:"nextn,omitempty"`
}

// ReportProvenance is provenance at a glance (provenance.json is the signed statement).
type ReportProvenance struct {
	Deps      []ResourceDescriptor `json:"resolved_dependencies"`
	Overrides []string             `json:"overrides"`
}

// ReportFile names one output by digest and size.
type ReportFile struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// ReportDomain is one IOMMU domain of the plan.
type ReportDomain struct {
	Domain   int   `json:"domain"`
	Entries  int   `json:"entries"`
	Resident int64 `json:"resident_bytes"`
}

// ReportTotals sums the weights.
type ReportTotals struct {
	Weights  int            `json:"weights"`
	Bytes    int64          `json:"bytes"`
	Resident int64          `json:"resident_bytes"`
	ByDType  map[string]int `json:"by_dtype"`
	MeanQErr float64        `json:"mean_qerr"`
	MaxQErr  float64        `json:"max_qerr"`
	// ExpertEntries counts the MoE expert-slice entries ("<name>#<e>") of ExpertTensors tensors.
	ExpertEntries int `json:"expert_entries,omitempty"`
	ExpertTensors int `json:"expert_tensors,omitempty"`
}

// ReportWeight is one pack entry.
type ReportWeight struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	// PromotedFrom is the base dtype of an entry write-orkpack promoted to its wider tier ("" otherwise).
	PromotedFrom string  `json:"promoted_from,omitempty"`
	N            int     `json:"n"`
	K            int     `json:"k"`
	Group        int     `json:"group"`
	Rotation     string  `json:"rotation"`
	ActBits      int     `json:"act_bits"`
	ActClip      float32 `json:"act_clip"`
	QErr         float64 `json:"qerr"`
	Bytes        int64   `json:"bytes"`
	Resident     int64   `json:"resident_bytes"`
	Domain       int     `json:"domain"`
}

func init() {
	Register(Define("report", 6, func(p ReportParams) (Spec, error) {
		if p.Name == "" {
			return Spec{}, fmt.Errorf("name: empty")
		}
		tool, err := orkpipeTool()
		if err != nil {
			return Spec{}, err
		}
		s := Spec{Inputs: []string{"pack", "stub", "verify"}, Outputs: []string{"report.json", "summary.txt", "report.html"},
			PeakMemory: 64 << 20, Tools: []Tool{tool}}
		if p.Screen {
			s.Inputs = append(s.Inputs, "screen")
		}
		if p.Board == "" {
			s.Inputs = append(s.Inputs, "board")
		}
		for _, d := range p.Deps {
			s.Inputs = append(s.Inputs, "dep."+d.Name)
		}
		if p.Routing {
			s.Inputs = append(s.Inputs, "routing")
		}
		if p.Residency {
			s.Inputs = append(s.Inputs, "residency")
		}
		if p.HeldOut != "" {
			if !p.Residency {
				return Spec{}, fmt.Errorf("held_out %q: a held-out routing is scored against a residency plan; none is bound", p.HeldOut)
			}
			s.Inputs = append(s.Inputs, "held-out")
		}
		return s, nil
	}, runReport))
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func runReport(ctx context.Context, p ReportParams, req Request) error {
	pf, sf := req.Inputs["pack"], req.Inputs["stub"]
	r, err := pack.Open(ctx, pf.Path)
	if err != nil {
		return err
	}
	defer r.Close()
	prof, err := boardProfile(p.Board, req)
	if err != nil {
		return err
	}
	overrides := p.Overrides
	if overrides == nil {
		overrides = []string{}
	}
	rep := Report{Name: p.Name, Pack: ReportFile{pf.Digest.String(), pf.Size}, Stub: ReportFile{sf.Digest.String(), sf.Size},
		Board: r.Board().Name, DomainCapacity: prof.Capacity(), Totals: ReportTotals{ByDType: map[string]int{}},
		Provenance: ReportProvenance{Deps: resolvedDeps(p.Deps, req), Overrides: overrides}, Model: p.Model, NextN: p.NextN}
	if err := readJSONFile(req.Inputs["verify"].Path, &rep.Verify); err != nil {
		return err
	}
	if p.Screen {
		rep.Screen = &ScreenResult{}
		if err := readJSONFile(req.Inputs["screen"].Path, rep.Screen); err != nil {
			return err
		}
	}
	if err := reportMoE(&rep, p, r, req); err != nil {
		return err
	}
	doms := map[int]*ReportDomain{}
	var sumQ float64
	expertTensors := map[string]bool{}
	for _, e := range r.Entries() {
		if base, _, ok := pack.SplitExpert(e.Name); ok {
			rep.Totals.ExpertEntries++
			expertTensors[base] = true
		}
		w := ReportWeight{Name: e.Name, DType: e.DType.String(), N: e.N, K: e.K, Group: e.Group, Rotation: e.Rotation.String(),
			ActBits: e.ActBits, ActClip: e.ActClip, QErr: e.QErr, Bytes: e.Length, Resident: e.ResidentBytes, Domain: e.Domain}
		if base, ok := p.PromoteFrom[e.Name]; ok && base != w.DType {
			w.PromotedFrom = base
		}
		rep.Weights = append(rep.Weights, w)
		rep.Totals.Weights++
		rep.Totals.Bytes += e.Length
		rep.Totals.Resident += e.ResidentBytes
		rep.Totals.ByDType[w.DType]++
		rep.Totals.MaxQErr = max(rep.Totals.MaxQErr, e.QErr)
		sumQ += e.QErr
		d := doms[e.Domain]
		if d == nil {
			d = &ReportDomain{Domain: e.Domain}
			doms[e.Domain] = d
		}
		d.Entries++
		d.Resident += e.ResidentBytes
	}
	rep.Totals.ExpertTensors = len(expertTensors)
	if rep.Totals.Weights > 0 {
		rep.Totals.MeanQErr = sumQ / float64(rep.Totals.Weights)
	}
	for _, d := range doms {
		rep.Domains = append(rep.Domains, *d)
	}
	sort.Slice(rep.Domains, func(i, j int) bool { return rep.Domains[i].Domain < rep.Domains[j].Domain })
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	page, err := reporthtml.Render(b)
	if err != nil {
		return fmt.Errorf("report.html of %s: %w", p.Name, err)
	}
	if err := os.WriteFile(req.Output("report.json"), b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(req.Output("report.html"), page, 0o644); err != nil {
		return err
	}
	return os.WriteFile(req.Output("summary.txt"), []byte(summaryText(&rep)), 0o644)
}

func summaryText(r *Report) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s: %d weights, %s on disk, %s resident on %s in %d of %d IOMMU domains\n", r.Name, r.Totals.Weights,
		mib(r.Totals.Bytes), mib(r.Totals.Resident), r.Board, len(r.Domains), r.Verify.MaxDomains)
	if m := r.Model; m != nil {
		line := reporthtml.ModelLine(m.Name, "", m.Architecture, m.ParamSize, m.Precision, m.Quantization)
		if m.License != "" {
			line += ", license " + m.License
		}
		fmt.Fprintf(&b, "model: %s\n", line)
	}
	var dts []string
	for dt := range r.Totals.ByDType {
		dts = append(dts, dt)
	}
	sort.Strings(dts)
	fmt.Fprintf(&b, "dtypes:")
	for _, dt := range dts {
		fmt.Fprintf(&b, " %s x%d", dt, r.Totals.ByDType[dt])
	}
	fmt.Fprintf(&b, "\n")
	if n := r.NextN; n != nil {
		fmt.Fprintf(&b, "not packed: %s (%d tensors, %s), kept in the stub as stored: llama.cpp runs them only to draft tokens for speculative decoding\n",
			nextnBlocks(n.Blocks), n.Tensors, mib(n.Bytes))
	}
	if r.Totals.ExpertEntries > 0 {
		fmt.Fprintf(&b, "experts: %d expert-slice entries of %d MoE tensors\n", r.Totals.ExpertEntries, r.Totals.ExpertTensors)
	}
	fmt.Fprintf(&b, "qerr: mean %.5f, max %.5f\n", r.Totals.MeanQErr, r.Totals.MaxQErr)
	worst := append([]ReportWeight(nil), r.Weights...)
	sort.SliceStable(worst, func(i, j int) bool { return worst[i].QErr > worst[j].QErr })
	for i := 0; i < len(worst) && i < 5; i++ {
		w := worst[i]
		fmt.Fprintf(&b, "  worst %-28s %-9s g%-3d %-8s a%d clip %-6.4g qerr %.5f\n", w.Name, w.DType, w.Group, w.Rotation, w.ActBits, w.ActClip, w.QErr)
	}
	fmt.Fprintf(&b, "%s\n", clipSummary(r.Weights))
	moeSummary(&b, r)
	if s := r.Screen; s != nil {
		fmt.Fprintf(&b, "screen (ctx %d, %d chunks): PPL %.4f vs float %.4f (ratio %.4f), mean KLD %.6f, same top token %.2f%%\n",
			s.Ctx, s.Chunks, s.PPL, s.BasePPL, s.PPLRatio, s.KLDMean, 100*s.SameTop)
	} else {
		fmt.Fprintf(&b, "screen: not screened (the recipe has no screen section)\n")
	}
	fmt.Fprintf(&b, "verified: pack (%d entries decoded), stub (%d tensors, %d owned holes), domain plan on %s\n",
		r.Verify.PackEntries, r.Verify.StubTensors, r.Verify.StubOwned, r.Verify.Board)
	return b.String()
}

// nextnBlocks names multi-token-prediction blocks: "the multi-token-prediction block blk.64", or
// "the multi-token-prediction blocks blk.64, blk.65".
func nextnBlocks(blocks []int) string {
	names := make([]string, len(blocks))
	for i, l := range blocks {
		names[i] = fmt.Sprintf("blk.%d", l)
	}
	if len(names) == 1 {
		return "the multi-token-prediction block " + names[0]
	}
	return "the multi-token-prediction blocks " + strings.Join(names, ", ")
}

// clipSummary says how the entries' activations are clipped: "activation clip: 1 (none) on every entry", or
// the range and mean over the clipped ones.
func clipSummary(ws []ReportWeight) string {
	n, lo, hi, sum := 0, float32(1), float32(0), 0.0
	for _, w := range ws {
		if w.ActClip < 1 {
			n++
			lo, hi, sum = min(lo, w.ActClip), max(hi, w.ActClip), sum+float64(w.ActClip)
		}
	}
	if n == 0 {
		return "activation clip: 1 (none) on every entry"
	}
	return fmt.Sprintf("activation clip: %d of %d entries clipped, %.4g..%.4g (mean %.4g)", n, len(ws), lo, hi, sum/float64(n))
}

func mib(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }
