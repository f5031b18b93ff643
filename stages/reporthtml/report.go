package reporthtml

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrReport is wrapped by the error of a report.json the pages cannot draw.
var ErrReport = errors.New("unusable report.json")

// report is the part of report.json the pages draw (stages.Report writes it).
type report struct {
	Name           string      `json:"name"`
	Pack           file        `json:"pack"`
	Stub           file        `json:"stub"`
	Board          string      `json:"board"`
	DomainCapacity int64       `json:"domain_capacity_bytes"`
	Domains        []domain    `json:"domains"`
	Totals         totals      `json:"totals"`
	Weights        []weight    `json:"weights"`
	Screen         *screen     `json:"screen"`
	Verify         verify      `json:"verify"`
	Provenance     *provenance `json:"provenance"`
	Routing        []routing   `json:"routing"`
	Model          *model      `json:"model"`
	NextN          *nextn      `json:"nextn"`
}

// nextn is report.json's account of the source's multi-token-prediction blocks, which the pack does
// not hold (stages.ReportNextN's JSON names).
type nextn struct {
	Blocks  []int `json:"blocks"`
	Tensors int   `json:"tensors"`
	Bytes   int64 `json:"bytes"`
}

// model is the part of report.json's description of the packed model the page draws
// (stages.ProvenanceModel's JSON names).
type model struct {
	Name         string `json:"name"`
	License      string `json:"license"`
	Architecture string `json:"architecture"`
	ParamSize    string `json:"paramSize"`
	Precision    string `json:"precision"`
	Quantization string `json:"quantization"`
}

// ModelLine describes a model in one line for people, from what is known of it (empty strings are
// left out): "tiny-qwen35-random 1 (qwen35, 571K params, int4, gptq)"; "" when nothing is. Used by
// report.html, the build's summary.txt and `orkpipe describe`.
func ModelLine(name, version, arch, params, precision, quant string) string {
	var details []string
	if params != "" {
		params += " params"
	}
	for _, d := range []string{arch, params, precision, quant} {
		if d != "" {
			details = append(details, d)
		}
	}
	line := strings.TrimSpace(name + " " + version)
	if len(details) > 0 {
		line = strings.TrimSpace(line + " (" + strings.Join(details, ", ") + ")")
	}
	return line
}

type file struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

type domain struct {
	Domain   int   `json:"domain"`
	Entries  int   `json:"entries"`
	Resident int64 `json:"resident_bytes"`
}

type totals struct {
	Weights       int            `json:"weights"`
	Bytes         int64          `json:"bytes"`
	Resident      int64          `json:"resident_bytes"`
	ByDType       map[string]int `json:"by_dtype"`
	MeanQErr      float64        `json:"mean_qerr"`
	MaxQErr       float64        `json:"max_qerr"`
	ExpertEntries int            `json:"expert_entries"`
	ExpertTensors int            `json:"expert_tensors"`
}

type weight struct {
	Name         string  `json:"name"`
	DType        string  `json:"dtype"`
	PromotedFrom string  `json:"promoted_from"`
	N            int     `json:"n"`
	K            int     `json:"k"`
	Group        int     `json:"group"`
	Rotation     string  `json:"rotation"`
	ActBits      int     `json:"act_bits"`
	ActClip      float64 `json:"act_clip"`
	QErr         float64 `json:"qerr"`
	Bytes        int64   `json:"bytes"`
	Resident     int64   `json:"resident_bytes"`
	Domain       int     `json:"domain"`
}

type screen struct {
	Ctx        int       `json:"ctx"`
	Chunks     int       `json:"chunks"`
	Tokens     int       `json:"tokens"`
	Scored     int       `json:"scored"`
	PPL        float64   `json:"ppl"`
	PPLErr     float64   `json:"ppl_err"`
	BasePPL    float64   `json:"base_ppl"`
	BasePPLErr float64   `json:"base_ppl_err"`
	PPLRatio   float64   `json:"ppl_ratio"`
	KLDMean    float64   `json:"kld_mean"`
	KLD        *kld      `json:"kld"`
	KLDPct     []float64 `json:"kld_percentiles"`
	SameTop    float64   `json:"same_top"`
	SameTopErr *float64  `json:"same_top_err"`
	Gates      struct {
		MaxPPLRatio float64 `json:"max_ppl_ratio"`
		MaxKLDMean  float64 `json:"max_kld_mean"`
	} `json:"gates"`
}

type kld struct {
	Mean    float64 `json:"mean"`
	MeanErr float64 `json:"mean_err"`
	Median  float64 `json:"median"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
}

type verify struct {
	PackEntries int    `json:"pack_entries"`
	PackIndex   string `json:"pack_index"`
	Domains     int    `json:"domains"`
	MaxDomains  int    `json:"max_domains"`
	StubTensors int    `json:"stub_tensors"`
	StubOwned   int    `json:"stub_owned"`
	StubHeader  string `json:"stub_header"`
}

type provenance struct {
	Deps      []dependency `json:"resolved_dependencies"`
	Overrides []string     `json:"overrides"`
}

type dependency struct {
	Name        string            `json:"name"`
	URI         string            `json:"uri"`
	Digest      map[string]string `json:"digest"`
	Annotations map[string]any    `json:"annotations"`
}

type routing struct {
	Layer  int     `json:"layer"`
	Counts []int64 `json:"counts"`
}

// parseReport decodes report.json and checks what the pages rely on. Unknown fields are ignored.
func parseReport(b []byte) (*report, error) {
	var r report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrReport, err)
	}
	bad := func(field, want string) error { return fmt.Errorf("%w: field %s: %s", ErrReport, field, want) }
	switch {
	case r.Name == "":
		return nil, bad("name", "empty, want the build's name")
	case r.Board == "":
		return nil, bad("board", "empty, want the board profile's name")
	case len(r.Weights) == 0:
		return nil, bad("weights", "none, want the pack's entries")
	case r.DomainCapacity < 0:
		return nil, bad("domain_capacity_bytes", "negative")
	}
	for i, w := range r.Weights {
		if w.Name == "" || w.DType == "" || w.Bytes < 0 || w.Resident < 0 || w.Domain < 0 {
			return nil, bad(fmt.Sprintf("weights[%d]", i), "want a name, a dtype, sizes >= 0 and a domain >= 0")
		}
	}
	for i, d := range r.Domains {
		if d.Domain < 0 || d.Entries < 0 || d.Resident < 0 {
			return nil, bad(fmt.Sprintf("domains[%d]", i), fmt.Sprintf("domain %d, %d entries, %d resident bytes: want each >= 0", d.Domain, d.Entries, d.Resident))
		}
	}
	if s := r.Screen; s != nil && len(s.KLDPct) > 0 {
		if len(s.KLDPct) != 101 || !sort.Float64sAreSorted(s.KLDPct) {
			return nil, bad("screen.kld_percentiles", fmt.Sprintf("%d values, want 101 non-decreasing ones (0, 1, ..., 100 %%)", len(s.KLDPct)))
		}
	}
	for i, rt := range r.Routing {
		if rt.Layer < 0 || len(rt.Counts) == 0 {
			return nil, bad(fmt.Sprintf("routing[%d]", i), "want a layer >= 0 and a count per expert")
		}
	}
	return &r, nil
}

// slot is where a pack entry sits in the heatmaps: block layer, weight kind (the name between
// "blk.N." and ".weight") and expert (-1 for a dense weight). ok is false for a weight outside
// the blocks (e.g. output.weight).
type slot struct {
	layer  int
	kind   string
	expert int
	ok     bool
}

func slotOf(name string) slot {
	s := slot{expert: -1}
	base, ex, hasEx := strings.Cut(name, "#")
	if hasEx {
		e, err := strconv.Atoi(ex)
		if err != nil || e < 0 {
			return s
		}
		s.expert = e
	}
	rest, ok := strings.CutPrefix(base, "blk.")
	if !ok {
		return s
	}
	num, kind, ok := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	if !ok || err != nil || l < 0 {
		return s
	}
	s.layer, s.kind, s.ok = l, strings.TrimSuffix(kind, ".weight"), true
	return s
}
