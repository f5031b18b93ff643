package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"orkpipe/internal/units"
)

// Measure is one command (or library call) timed several times.
type Measure struct {
	Label   string    `json:"label"`
	Role    string    `json:"role"`              // "subject" or "baseline"
	Command string    `json:"command,omitempty"` // how to reproduce it by hand
	Samples []float64 `json:"samples_s,omitempty"`
	CPU     []float64 `json:"cpu_s,omitempty"` // user + system CPU seconds per run, where recorded (builds, the rtn row's llama-quantize)
	// Faults are the page faults (minor + major) of each run, where recorded (the rtn row): what a
	// fault costs differs several-fold between hosts (a PVM guest's shadow page tables), and with it
	// the time of a tool that faults in all its memory fresh.
	Faults  []float64 `json:"page_faults,omitempty"`
	Stats   Stats     `json:"stats"`
	Bytes   int64     `json:"bytes,omitempty"`      // bytes processed per run (throughput)
	PeakRSS int64     `json:"peak_rss,omitempty"`   // highest peak RSS of the runs, bytes
	Budget  int64     `json:"mem_budget,omitempty"` // --mem given to the run, bytes
	GFLOPS  float64   `json:"gflops,omitempty"`     // achieved rate (GPTQ, matmul)
	Share   float64   `json:"share,omitempty"`      // calibrate: its rate as a fraction of the build's own kernels' (calibShare)
	Ratio   float64   `json:"ratio,omitempty"`      // baselines: subject median / this median
	Skipped string    `json:"skipped,omitempty"`    // why it was not measured
	Extra   string    `json:"extra,omitempty"`      // a short fact shown in the notes column
	X       float64   `json:"x,omitempty"`          // scaling rows: the size (layers, nodes) fitted against
	// Versus names another measure of the row (a peer tool) this one is compared with: VsTime is
	// this median / that median, VsRSS this peak RSS / that peak RSS (0: not measured).
	Versus string  `json:"versus,omitempty"`
	VsTime float64 `json:"vs_time,omitempty"`
	VsRSS  float64 `json:"vs_rss,omitempty"`
}

// Row is one line of the list: a subject measured against its baselines.
type Row struct {
	ID       string    `json:"id"`
	Title    string    `json:"title"`
	Note     string    `json:"note,omitempty"`
	Measures []Measure `json:"measures"`
	Fit      *Fit      `json:"fit,omitempty"`
	FitUnit  string    `json:"fit_unit,omitempty"` // x unit of the fit ("layer", "node")
	Skipped  string    `json:"skipped,omitempty"`
}

// Target is one acceptance target checked against the figures of this run.
type Target struct {
	Goal  string `json:"goal"`
	Value string `json:"value"`
	Met   *bool  `json:"met,omitempty"` // nil: not measured in this run
	Why   string `json:"why,omitempty"`
}

// Report is everything one harness run measured; it is written as JSON and rendered as markdown.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Profile  string    `json:"profile"`
	Runs     int       `json:"runs"`
	LongRuns int       `json:"long_runs"`
	BLAS     bool      `json:"blas"`
	Machine  Machine   `json:"machine"`
	Rows     []Row     `json:"rows"`
	Targets  []Target  `json:"targets"`
}

// finish computes every measure's stats and every baseline's ratio against its row's subject.
func (r *Row) finish() {
	var subj *Measure
	for i := range r.Measures {
		m := &r.Measures[i]
		if m.Skipped == "" {
			m.Stats = Summarize(m.Samples)
		}
		if m.Role == "subject" && subj == nil {
			subj = m
		}
	}
	for i := range r.Measures {
		m := &r.Measures[i]
		if m.Role == "baseline" && subj != nil && subj.Skipped == "" && m.Skipped == "" {
			m.Ratio = Ratio(subj.Stats, m.Stats)
		}
		m.VsTime, m.VsRSS = 0, 0
		if v := r.measure(m.Versus); v != nil && m.Versus != "" && m.Skipped == "" && v.Skipped == "" {
			m.VsTime = Ratio(m.Stats, v.Stats)
			if m.PeakRSS > 0 && v.PeakRSS > 0 {
				m.VsRSS = float64(m.PeakRSS) / float64(v.PeakRSS)
			}
		}
	}
	r.refit()
}

// sizeInLabel reads the size, in the row's FitUnit, out of the labels scaling rows write
// ("cold rtn build, 4 layer(s)"; "no-op rebuild, 8 layers (117 nodes)"), for results recorded
// before Measure.X existed.
var sizeInLabel = map[string]*regexp.Regexp{
	"layer": regexp.MustCompile(`(\d+) layer`),
	"node":  regexp.MustCompile(`\((\d+) nodes\)`),
}

// refit fits the median time of a scaling row's measured sizes against the size (Measure.X, else
// the size in its label), so a row stopped before its last size (an interrupt) still reports the
// fit of the sizes it finished. Rows without FitUnit, or with fewer than two measured sizes, are
// left as they are.
func (r *Row) refit() {
	if r.FitUnit == "" {
		return
	}
	var xs, ys []float64
	for _, m := range r.Measures {
		if m.Role != "subject" || len(m.Samples) == 0 {
			continue
		}
		x := m.X
		if re := sizeInLabel[r.FitUnit]; x == 0 && re != nil {
			if sm := re.FindStringSubmatch(m.Label); sm != nil {
				x, _ = strconv.ParseFloat(sm[1], 64)
			}
		}
		if x > 0 {
			xs, ys = append(xs, x), append(ys, Summarize(m.Samples).Median)
		}
	}
	if f, err := LinearFit(xs, ys); err == nil {
		r.Fit = &f
	}
}

// measure returns the measure labelled label (nil if none).
func (r *Row) measure(label string) *Measure {
	for i := range r.Measures {
		if r.Measures[i].Label == label {
			return &r.Measures[i]
		}
	}
	return nil
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the results %s: %w", path, err)
	}
	return nil
}

const (
	beginMarker = "<!-- bench:begin (written by `go run ./bench`; do not edit by hand) -->"
	endMarker   = "<!-- bench:end -->"
)

// Splice replaces what lies between the markers in doc with table (the markers stay). A document
// without both markers, in order, is an error naming what is missing.
func Splice(doc, table string) (string, error) {
	i := strings.Index(doc, beginMarker)
	j := strings.Index(doc, endMarker)
	if i < 0 || j < 0 || j < i {
		return "", fmt.Errorf("want the lines %q and %q, in that order", beginMarker, endMarker)
	}
	return doc[:i+len(beginMarker)] + "\n" + table + doc[j:], nil
}

func spliceFile(path, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("markdown table: %w", err)
	}
	out, err := Splice(string(b), table)
	if err != nil {
		return fmt.Errorf("markdown table in %s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// buildName says how a run built orkpipe, as the table's header and merged rows' notes print it.
func buildName(blas bool) string {
	if blas {
		return "with `-tags blas`"
	}
	return "pure Go"
}

// Markdown renders the machine facts, the results table and the targets table.
func Markdown(rep *Report) string {
	var b bytes.Buffer
	m := rep.Machine
	fmt.Fprintf(&b, "Run %s to %s (UTC), profile `%s`, %d runs per measurement (%d for the long rows: RTN build, GPTQ, scaling builds, RSS), interleaved; orkpipe built %s.\n",
		rep.Started.UTC().Format("2006-01-02 15:04"), rep.Finished.UTC().Format("15:04"), rep.Profile, rep.Runs, rep.LongRuns, buildName(rep.BLAS))
	fmt.Fprintf(&b, "Machine: %s, %d cores, %s RAM, %s, Linux %s, load average %s at start and %s at end.\n\n",
		m.CPU, m.Cores, formatBytes(m.RAM), m.Go, m.Kernel, m.LoadStart, m.LoadEnd)
	b.WriteString("| row | measurement | runs | median | min – max (spread) | rate | ratio | notes |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rep.Rows {
		title := r.Title
		if r.Skipped != "" {
			fmt.Fprintf(&b, "| %s | | | | | | | %s |\n", title, esc(r.Skipped))
			continue
		}
		for i, ms := range r.Measures {
			label := esc(ms.Label)
			if ms.Role == "subject" {
				label = "**" + label + "**"
			}
			row := title
			if i > 0 {
				row = ""
			}
			if ms.Skipped != "" {
				fmt.Fprintf(&b, "| %s | %s | | | | | | %s |\n", row, label, esc(ms.Skipped))
				continue
			}
			st := ms.Stats
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s – %s (%.0f%%) | %s | %s | %s |\n", row, label, st.N,
				formatSeconds(st.Median), formatSeconds(st.Min), formatSeconds(st.Max), st.Spread*100,
				rate(ms), ratioText(ms), esc(notes(ms)))
		}
		if r.Fit != nil {
			fmt.Fprintf(&b, "| | linear fit | %d | | | | | %s/%s, intercept %s, r² %.4f |\n", r.Fit.N,
				formatSeconds(r.Fit.Slope), r.FitUnit, formatSeconds(r.Fit.Intercept), r.Fit.R2)
		}
		if r.Note != "" {
			fmt.Fprintf(&b, "| | | | | | | | %s |\n", esc(r.Note))
		}
	}
	b.WriteString("\nratio = median time of the row's subject (bold) / median time of that baseline, both measured in this run.\n")
	if len(rep.Targets) > 0 {
		b.WriteString("\n| target | this run | met |\n| --- | --- | --- |\n")
		for _, t := range rep.Targets {
			met := "not measured"
			if t.Met != nil {
				met = map[bool]string{true: "met", false: "**missed**"}[*t.Met]
			}
			if t.Why != "" {
				met += " (" + t.Why + ")"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", esc(t.Goal), esc(t.Value), esc(met))
		}
	}
	return b.String()
}

func rate(ms Measure) string {
	switch {
	case ms.GFLOPS > 0:
		return fmt.Sprintf("%.2f GFLOP/s", ms.GFLOPS)
	case ms.Bytes > 0 && ms.Stats.Median > 0:
		return fmt.Sprintf("%.0f MB/s", float64(ms.Bytes)/ms.Stats.Median/1e6)
	}
	return ""
}

func ratioText(ms Measure) string {
	if ms.Role != "baseline" || ms.Ratio == 0 {
		return ""
	}
	return fmt.Sprintf("%.3gx", ms.Ratio)
}

func notes(ms Measure) string {
	var parts []string
	if ms.PeakRSS > 0 {
		s := "peak RSS " + formatBytes(ms.PeakRSS)
		if ms.Budget > 0 {
			s += fmt.Sprintf(" (--mem %s)", formatBytes(ms.Budget))
		}
		parts = append(parts, s)
	}
	if ms.Extra != "" {
		parts = append(parts, ms.Extra)
	}
	if len(ms.Faults) > 0 && len(ms.CPU) > 0 {
		parts = append(parts, fmt.Sprintf("CPU %s, %.1fk page faults (medians)", formatSeconds(Summarize(ms.CPU).Median), Summarize(ms.Faults).Median/1e3))
	}
	if ms.VsTime > 0 {
		s := fmt.Sprintf("%.3gx %s's time", ms.VsTime, ms.Versus)
		if ms.VsRSS > 0 {
			s += fmt.Sprintf(", %.3gx its peak RSS", ms.VsRSS)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func formatSeconds(s float64) string {
	a := s
	if a < 0 {
		a = -a
	}
	switch {
	case a == 0:
		return "0 s"
	case a < 1e-3:
		return fmt.Sprintf("%.1f µs", s*1e6)
	case a < 1:
		return fmt.Sprintf("%.1f ms", s*1e3)
	case a < 600:
		return fmt.Sprintf("%.2f s", s)
	}
	return fmt.Sprintf("%.1f min", s/60)
}

func formatBytes(n int64) string { return units.FormatSize(n) }
