package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
)

var update = flag.Bool("update", false, "rewrite testdata/table.golden")

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want Stats
	}{
		{"empty", nil, Stats{}},
		{"one", []float64{2}, Stats{N: 1, Median: 2, Min: 2, Max: 2}},
		{"odd unsorted", []float64{3, 1, 2}, Stats{N: 3, Median: 2, Min: 1, Max: 3, Spread: 1}},
		{"even", []float64{4, 1, 3, 2}, Stats{N: 4, Median: 2.5, Min: 1, Max: 4, Spread: 1.2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := Summarize(tc.in)
			if got.N != tc.want.N || got.Median != tc.want.Median || got.Min != tc.want.Min || got.Max != tc.want.Max ||
				math.Abs(got.Spread-tc.want.Spread) > 1e-12 {
				t.Errorf("Summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("Summarize reordered its argument: %v, was %v", tc.in, in)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	a, b := Summarize([]float64{3, 3, 3}), Summarize([]float64{1, 2, 1.5})
	if got := Ratio(a, b); got != 2 {
		t.Errorf("Ratio = %v, want 2", got)
	}
	if got := Ratio(a, Stats{}); got != 0 {
		t.Errorf("Ratio against no samples = %v, want 0", got)
	}
}

func TestLinearFit(t *testing.T) {
	f, err := LinearFit([]float64{1, 2, 4, 8}, []float64{5, 7, 11, 19})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.Slope-2) > 1e-12 || math.Abs(f.Intercept-3) > 1e-12 || math.Abs(f.R2-1) > 1e-12 || f.N != 4 {
		t.Errorf("exact line: %+v, want slope 2 intercept 3 r2 1", f)
	}
	// Noisy points: r² below 1, slope from the normal equations.
	f, err = LinearFit([]float64{0, 1, 2, 3}, []float64{0, 2, 1, 3})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.Slope-0.8) > 1e-12 || math.Abs(f.Intercept-0.3) > 1e-12 || math.Abs(f.R2-0.64) > 1e-12 {
		t.Errorf("noisy points: %+v, want slope 0.8 intercept 0.3 r2 0.64", f)
	}
	for _, tc := range []struct{ x, y []float64 }{{[]float64{1}, []float64{1}}, {[]float64{2, 2}, []float64{1, 3}}, {[]float64{1, 2}, []float64{1}}} {
		if _, err := LinearFit(tc.x, tc.y); err == nil {
			t.Errorf("LinearFit(%v, %v): no error", tc.x, tc.y)
		}
	}
}

func TestSelectRows(t *testing.T) {
	all := specs("quick", []int{1, 2, 4, 8}, []int64{4 << 30, 8 << 30})
	sel, err := selectRows(all, "quick", "", "hash,cas")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(sel, "hash") || slices.Contains(sel, "gptq-17408") || !slices.Contains(sel, "noop") {
		t.Errorf("quick -skip hash,cas: %v", sel)
	}
	sel, err = selectRows(all, "quick", "gptq-17408", "")
	if err != nil || !slices.Equal(sel, []string{"gptq-17408"}) {
		t.Errorf("-only gptq-17408: %v, %v", sel, err)
	}
	if sel, _ = selectRows(all, "full", "", ""); len(sel) != len(all) {
		t.Errorf("full: %d rows, want all %d", len(sel), len(all))
	}
	if _, err := selectRows(all, "quick", "nosuch", ""); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown row: %v", err)
	}
}

func TestSplice(t *testing.T) {
	doc := "# Perf\n\nbefore\n" + beginMarker + "\nold table\n" + endMarker + "\nafter\n"
	got, err := Splice(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Perf\n\nbefore\n" + beginMarker + "\nnew table\n" + endMarker + "\nafter\n"
	if got != want {
		t.Errorf("Splice:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{"no markers", endMarker + beginMarker, beginMarker + " only"} {
		if _, err := Splice(bad, "x"); err == nil {
			t.Errorf("Splice(%q): no error", bad)
		}
	}
}

// sampleReport is a fixed report exercising every kind of line of the table.
func sampleReport() *Report {
	rep := &Report{
		Started: time.Date(2026, 11, 29, 15, 15, 0, 0, time.UTC), Finished: time.Date(2026, 11, 29, 15, 40, 0, 0, time.UTC),
		Profile: "quick", Runs: 3, LongRuns: 1,
		Machine: Machine{CPU: "Test CPU", Cores: 2, RAM: 24 << 30, Go: "go1.26.0", Kernel: "6.1.0", LoadStart: "1.00 2.00 3.00", LoadEnd: "2.00 2.00 2.00"},
		Rows: []Row{
			{ID: "hash", Title: "hash 2.00 GiB", Note: "page cache warm", Measures: []Measure{
				{Label: "b3sum", Role: "baseline", Bytes: 2 << 30, Samples: []float64{1.0, 1.2, 1.1}},
				{Label: "sha256sum", Role: "baseline", Skipped: "skipped: sha256sum not on PATH (apt-get install -y coreutils)"},
				{Label: "orkpipe hash", Role: "subject", Bytes: 2 << 30, Samples: []float64{0.9, 0.8, 1.0}, PeakRSS: 30 << 20},
			}},
			{ID: "noop", Title: "no-op rebuild", Measures: []Measure{
				{Label: "cold build", Role: "baseline", Samples: []float64{20, 21, 19}, Budget: 8 << 30, PeakRSS: 60 << 20},
				{Label: "no-op rebuild", Role: "subject", Samples: []float64{0.15, 0.14, 0.2}, Budget: 8 << 30, PeakRSS: 50 << 20},
			}},
			{ID: "gptq-5120", Title: "GPTQ", Measures: []Measure{
				{Label: "matmul, pure Go", Role: "reference", Samples: []float64{2}, GFLOPS: 8.6},
				{Label: "GPTQ, pure Go", Role: "subject", Samples: []float64{40}, GFLOPS: 5.5, Extra: "64% of the matmul's GFLOP/s"},
			}},
			{ID: "calib", Title: "calibrate", Measures: []Measure{
				{Label: "sgemm, -tags blas", Role: "reference", Samples: []float64{0.2}, GFLOPS: 85.9},
				{Label: "dgemm, -tags blas", Role: "reference", Samples: []float64{0.4}, GFLOPS: 42.9},
				{Label: "calibrate, -tags blas", Role: "subject", Samples: []float64{12.5}, GFLOPS: 43.0, Share: 0.52, Extra: "52% of the sgemm/dgemm rate"},
				{Label: "calibrate, -tags blas, 8 x 128 (dense Hessians)", Role: "subject", Samples: []float64{24.0}, GFLOPS: 44.8, Share: 0.61, Extra: "61% of the sgemm/dgemm rate"},
				{Label: "sgemm, pure Go", Role: "reference", Skipped: "skipped: -calib-pure-go=false"},
			}},
			{ID: "scale-rtn", Title: "scaling", FitUnit: "layer", Fit: &Fit{Slope: 95, Intercept: 12, R2: 0.9987, N: 4}, Measures: []Measure{
				{Label: "cold rtn build, 1 layer(s)", Role: "subject", Samples: []float64{107}},
			}},
			{ID: "rss", Title: "rss", Skipped: "skipped: -profile full only"},
		},
	}
	for i := range rep.Rows {
		rep.Rows[i].finish()
	}
	rep.Targets = targets(rep)
	return rep
}

func TestMarkdownGolden(t *testing.T) {
	got := Markdown(sampleReport())
	path := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./bench -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("markdown differs from %s (go test ./bench -update to accept):\n%s", path, got)
	}
}

func TestTargets(t *testing.T) {
	rep := sampleReport()
	ts := targets(rep)
	byGoal := map[string]Target{}
	for _, tg := range ts {
		byGoal[tg.Goal] = tg
	}
	hash := byGoal["hashing >= 1.0x b3sum throughput"]
	if hash.Met == nil || !*hash.Met || hash.Value != "1.22x b3sum's throughput" {
		t.Errorf("hash target: %+v (value %q)", hash, hash.Value)
	}
	noop := byGoal["no-op rebuild < 2% of the cold build"]
	if noop.Met == nil || !*noop.Met || noop.Value != "0.75% of cold" {
		t.Errorf("no-op target: %+v (value %q)", noop, noop.Value)
	}
	if pull := byGoal["pull <= 2x cp"]; pull.Met != nil {
		t.Errorf("pull target without a pull row: %+v", pull)
	}
	rss := byGoal["peak RSS under --mem in every build"]
	if rss.Met == nil || !*rss.Met {
		t.Errorf("rss target: %+v", rss)
	}
	// A build over its budget misses the target.
	rep.Rows[1].Measures[1].PeakRSS = 9 << 30
	for _, tg := range targets(rep) {
		if tg.Goal == rss.Goal && (tg.Met == nil || *tg.Met) {
			t.Errorf("a build over --mem: %+v", tg)
		}
	}
	// A missed ratio.
	rep.Rows[1].Measures[1].Samples = []float64{1, 1, 1}
	rep.Rows[1].finish()
	for _, tg := range targets(rep) {
		if tg.Goal == noop.Goal && (tg.Met == nil || *tg.Met) {
			t.Errorf("no-op at 5%% of cold: %+v", tg)
		}
	}
}

func TestMergeRows(t *testing.T) {
	old := sampleReport()
	old.BLAS = true // this run is pure Go: a kept row's note names the build of the run that measured it
	path := filepath.Join(t.TempDir(), "old.json")
	if err := writeJSON(path, old); err != nil {
		t.Fatal(err)
	}
	rep := &Report{Rows: []Row{
		{ID: "hash", Title: "hash", Skipped: "skipped: not in -only"},
		{ID: "noop", Title: "no-op rebuild (new)", Measures: []Measure{{Label: "no-op rebuild", Role: "subject", Samples: []float64{1}}}},
		{ID: "rss", Title: "rss", Skipped: "skipped: -profile full only"},
	}}
	if err := mergeRows(rep, path); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rep.Rows))
	}
	if h := rep.Rows[0]; h.Skipped != "" || len(h.Measures) != 3 || !strings.Contains(h.Note, "from the run of 2026-11-29 15:15 to 15:40 (orkpipe built with `-tags blas`; load average") {
		t.Errorf("hash row not taken from the old run, or its note does not name the run's build: %+v", h)
	}
	if rep.Rows[1].Title != "no-op rebuild (new)" {
		t.Errorf("a measured row was replaced: %+v", rep.Rows[1])
	}
	if rep.Rows[2].Skipped == "" {
		t.Errorf("a row skipped in both runs lost its reason: %+v", rep.Rows[2])
	}
	if err := mergeRows(rep, filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("merging a missing file: no error")
	}
}

func TestMergeRowsOfASpecWithTwoRows(t *testing.T) {
	old := &Report{Rows: []Row{{ID: "push", Title: "push"}, {ID: "pull", Title: "pull"}}}
	path := filepath.Join(t.TempDir(), "old.json")
	if err := writeJSON(path, old); err != nil {
		t.Fatal(err)
	}
	rep := &Report{Rows: []Row{{ID: "push-pull", Title: "push-pull", Skipped: "skipped: not in -only"}}}
	if err := mergeRows(rep, path); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].ID != "push" || rep.Rows[1].ID != "pull" {
		t.Errorf("push-pull merged as %+v, want the push and pull rows", rep.Rows)
	}
}

// TestRefit: a scaling row fits the medians of the sizes it measured — from Measure.X, or from the
// size in the label for results recorded before X existed — and skips sizes never measured (a row
// stopped by an interrupt).
func TestRefit(t *testing.T) {
	r := Row{ID: "scale-gptq", FitUnit: "layer", Measures: []Measure{
		{Label: "cold gptq build, 1 layer(s)", Role: "subject", Samples: []float64{10}},
		{Label: "cold gptq build, 2 layer(s)", Role: "subject", Samples: []float64{20}, X: 2},
		{Label: "cold gptq build, 4 layer(s)", Role: "subject", Samples: []float64{40}},
		{Label: "cold gptq build, 8 layer(s)", Role: "subject"}, // interrupted: no sample
	}}
	r.finish()
	if r.Fit == nil || math.Abs(r.Fit.Slope-10) > 1e-9 || math.Abs(r.Fit.Intercept) > 1e-9 || r.Fit.R2 < 0.999999 {
		t.Fatalf("fit %+v, want slope 10 s/layer, intercept 0, r² 1", r.Fit)
	}
	nodes := Row{FitUnit: "node", Measures: []Measure{
		{Label: "no-op rebuild, 8 layers (100 nodes)", Role: "subject", Samples: []float64{0.1}},
		{Label: "no-op rebuild, 16 layers (200 nodes)", Role: "subject", Samples: []float64{0.2}},
	}}
	nodes.finish()
	if nodes.Fit == nil || math.Abs(nodes.Fit.Slope-0.001) > 1e-12 {
		t.Fatalf("node fit %+v, want 1 ms per node (fitted against nodes, not layers)", nodes.Fit)
	}
	one := Row{FitUnit: "layer", Measures: []Measure{{Label: "cold gptq build, 1 layer(s)", Role: "subject", Samples: []float64{10}}}}
	one.finish()
	if one.Fit != nil {
		t.Fatalf("one size fitted: %+v", one.Fit)
	}
}

// TestMergeRowsJoinsMeasures: a row measured in both runs keeps this run's measures and gains the
// earlier run's measures of other labels (the 4 GiB and 8 GiB rss builds run separately), each
// naming its run; a label measured in both keeps this run's figure.
func TestMergeRowsJoinsMeasures(t *testing.T) {
	old := &Report{Started: time.Date(2026, 11, 29, 17, 25, 0, 0, time.UTC), Finished: time.Date(2026, 11, 29, 17, 43, 0, 0, time.UTC),
		Rows: []Row{{ID: "rss", Title: "rss", Measures: []Measure{
			{Label: "cold GPTQ build --mem 4.00 GiB", Role: "subject", Samples: []float64{1066}, PeakRSS: 4289011712},
			{Label: "cold GPTQ build --mem 8.00 GiB", Role: "subject", Samples: []float64{999}},
		}}}}
	path := filepath.Join(t.TempDir(), "old.json")
	if err := writeJSON(path, old); err != nil {
		t.Fatal(err)
	}
	rep := &Report{Rows: []Row{{ID: "rss", Title: "rss", Measures: []Measure{
		{Label: "cold GPTQ build --mem 8.00 GiB", Role: "subject", Samples: []float64{830}},
	}}}}
	if err := mergeRows(rep, path); err != nil {
		t.Fatal(err)
	}
	ms := rep.Rows[0].Measures
	if len(ms) != 2 || ms[0].Samples[0] != 830 || ms[1].Label != "cold GPTQ build --mem 4.00 GiB" ||
		!strings.Contains(ms[1].Extra, "from the run of 2026-11-29 17:25 to 17:43") || ms[1].Stats.Median != 1066 {
		t.Errorf("merged measures %+v", ms)
	}
}

// TestMergeScalingRowKeepsItsSizes: a scaling row measured in this run takes no sizes from an
// earlier run (its fit would mix hosts and loads), and a measure carried over twice names only the
// run that measured it.
func TestMergeScalingRowKeepsItsSizes(t *testing.T) {
	old := &Report{Started: time.Date(2026, 11, 29, 17, 25, 0, 0, time.UTC), Finished: time.Date(2026, 11, 29, 17, 43, 0, 0, time.UTC),
		Rows: []Row{
			{ID: "scale-gptq", Title: "scale-gptq", FitUnit: "layer", Measures: []Measure{
				{Label: "cold gptq build, 4 layer(s)", Role: "subject", Samples: []float64{2736}}}},
			{ID: "rss", Title: "rss", Measures: []Measure{
				{Label: "cold GPTQ build --mem 4.00 GiB", Role: "subject", Samples: []float64{1066}, Extra: "from the run of 2026-11-28 10:00 to 10:20"}}},
		}}
	path := filepath.Join(t.TempDir(), "old.json")
	if err := writeJSON(path, old); err != nil {
		t.Fatal(err)
	}
	rep := &Report{Rows: []Row{
		{ID: "scale-gptq", Title: "scale-gptq", FitUnit: "layer", Measures: []Measure{
			{Label: "cold gptq build, 1 layer(s)", Role: "subject", Samples: []float64{146}},
			{Label: "cold gptq build, 2 layer(s)", Role: "subject", Samples: []float64{281}}}},
		{ID: "rss", Title: "rss", Measures: []Measure{
			{Label: "cold GPTQ build --mem 8.00 GiB", Role: "subject", Samples: []float64{830}}}},
	}}
	if err := mergeRows(rep, path); err != nil {
		t.Fatal(err)
	}
	sg := rep.Rows[0]
	sg.refit()
	if len(sg.Measures) != 2 || sg.Fit == nil || math.Abs(sg.Fit.Slope-135) > 1e-9 {
		t.Errorf("scaling row after the merge: measures %+v, fit %+v", sg.Measures, sg.Fit)
	}
	rss := rep.Rows[1].Measures
	if len(rss) != 2 || rss[1].Extra != "from the run of 2026-11-28 10:00 to 10:20" {
		t.Errorf("rss measures after the merge %+v", rss)
	}
}

// TestMergeKeepsTheMeasuringRun: a row merged before names the run that measured it; merging it
// again adds no run, and a note naming several runs (older harnesses) keeps the first.
func TestMergeKeepsTheMeasuringRun(t *testing.T) {
	old := &Report{Started: time.Date(2026, 11, 29, 15, 39, 0, 0, time.UTC), Rows: []Row{{ID: "scale-rtn", Title: "scale-rtn",
		Note:     "fresh cache per run; from the run of 2026-11-29 14:53 to 15:18 (x); from the run of 2026-11-29 15:20 to 15:27 (y)",
		Measures: []Measure{{Label: "cold rtn build, 1 layer(s)", Role: "subject", Samples: []float64{45}}}}}}
	path := filepath.Join(t.TempDir(), "old.json")
	if err := writeJSON(path, old); err != nil {
		t.Fatal(err)
	}
	rep := &Report{Rows: []Row{{ID: "scale-rtn", Title: "scale-rtn", Skipped: "skipped: not in -only"}}}
	if err := mergeRows(rep, path); err != nil {
		t.Fatal(err)
	}
	if got, want := rep.Rows[0].Note, "fresh cache per run; from the run of 2026-11-29 14:53 to 15:18 (x)"; got != want {
		t.Errorf("note %q, want %q", got, want)
	}
}

// TestVersusPeerTool: the RTN row's builds are compared with llama-quantize (time and peak RSS)
// and the two RTN targets read those ratios.
func TestVersusPeerTool(t *testing.T) {
	rtn := func(clip, noclip float64, rss int64) *Report {
		r := Row{ID: "rtn", Measures: []Measure{
			{Label: "llama-quantize Q4_0", Role: "baseline", Samples: []float64{4, 5, 6}, PeakRSS: 2 << 30},
			{Label: "orkpipe build (cold), clip search", Role: "subject", Samples: []float64{clip}, PeakRSS: rss, Versus: "llama-quantize Q4_0"},
			{Label: "orkpipe build (cold), clip_grid [1.0]", Role: "subject", Samples: []float64{noclip}, PeakRSS: rss, Versus: "llama-quantize Q4_0"},
		}}
		r.finish()
		return &Report{Rows: []Row{r}}
	}
	for _, tc := range []struct {
		name            string
		clip, noclip    float64
		rss             int64
		wantClip, want1 bool
		clipValue       string
	}{
		{"both met", 5, 2.5, 1 << 30, true, true, "1x its time, 0.5x its peak RSS"},
		{"slower", 6, 2.6, 1 << 30, false, false, "1.2x its time, 0.5x its peak RSS"},
		{"more memory", 4, 2, 3 << 30, false, true, "0.8x its time, 1.5x its peak RSS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := rtn(tc.clip, tc.noclip, tc.rss)
			m := rep.Rows[0].Measures[1]
			if want := tc.clip / 5; math.Abs(m.VsTime-want) > 1e-12 {
				t.Errorf("VsTime %v, want %v", m.VsTime, want)
			}
			if !strings.Contains(notes(m), "x llama-quantize Q4_0's time") {
				t.Errorf("notes %q do not name the peer tool", notes(m))
			}
			got := map[string]Target{}
			for _, tg := range targets(rep) {
				got[tg.Goal] = tg
			}
			c := got["RTN build with clip search <= 1.0x llama-quantize Q4_0's time and peak RSS"]
			n := got["RTN build without clip search <= 0.5x llama-quantize Q4_0's time"]
			if c.Met == nil || *c.Met != tc.wantClip || c.Value != tc.clipValue {
				t.Errorf("clip target %+v (value %q), want met %v value %q", c, c.Value, tc.wantClip, tc.clipValue)
			}
			if n.Met == nil || *n.Met != tc.want1 {
				t.Errorf("no-clip target %+v, want met %v", n, tc.want1)
			}
		})
	}
	// Without llama-quantize the targets are not measured.
	rep := rtn(5, 2.5, 1<<30)
	rep.Rows[0].Measures[0].Skipped = "skipped: llama-quantize not on PATH"
	rep.Rows[0].finish()
	for _, tg := range targets(rep) {
		if strings.HasPrefix(tg.Goal, "RTN build") && tg.Met != nil {
			t.Errorf("target %q judged without llama-quantize: %+v", tg.Goal, tg)
		}
	}
}

// TestCalibFlops: the calibrate row's flop count for a 27B-shaped layer (4 x 128 tokens) is the
// issue's (~3.4e11 forward, ~2e11 Hessians), and the share is the time at the kernels' rates over the
// measured time.
func TestCalibFlops(t *testing.T) {
	fwd, hess := calibFlops(5120, 5120, 1024, 17408, 4, 128)
	// forward: 512 rows x 2 x (2·5120² + 2·1024·5120 + 3·17408·5120) + attention 4 x 4·128²·5120
	if want := 512*2*(2*5120*5120+2*1024*5120+3*17408*5120.0) + 4*4*128*128*5120.0; fwd != want {
		t.Errorf("forward flops %.6g, want %.6g", fwd, want)
	}
	if want := 512 * (3*5120*5121.0 + 17408*17409.0); hess != want {
		t.Errorf("hessian flops %.6g, want %.6g", hess, want)
	}
	if fwd < 3.3e11 || fwd > 3.5e11 || hess < 1.9e11 || hess > 2.0e11 {
		t.Errorf("forward %.3g, hessians %.3g: not the issue's ~3.4e11 and ~2e11", fwd, hess)
	}
	// 100 GFLOP/s sgemm, 50 dgemm: 1e11 + 1e11 flops take 1 s + 2 s; measured 6 s is 50%.
	if s := calibShare(1e11, 1e11, 100, 50, 6); math.Abs(s-0.5) > 1e-12 {
		t.Errorf("share %v, want 0.5", s)
	}
	if s := calibShare(1e11, 1e11, 0, 50, 6); s != 0 {
		t.Errorf("share without an sgemm rate %v, want 0", s)
	}
}

// TestCalibTarget: the calibrate target is judged on every -tags blas shape the row measured, and
// not at all without the 4 x 128.
func TestCalibTarget(t *testing.T) {
	subject := func(label string, share float64) Measure { return Measure{Label: label, Role: "subject", Share: share} }
	for _, tc := range []struct {
		name     string
		measures []Measure
		met      *bool
		value    string
	}{
		{"issue's shape only", []Measure{subject(calibBLASLabel, 0.62)}, ptr(true), "62% of the rate at 4 x 128 tokens"},
		{"both met", []Measure{subject(calibBLASLabel, 0.62), subject(calibBLASDenseLabel, 0.55)}, ptr(true),
			"62% of the rate at 4 x 128 tokens, 55% of the rate at 8 x 128"},
		{"dense missed", []Measure{subject(calibBLASLabel, 0.62), subject(calibBLASDenseLabel, 0.41)}, ptr(false),
			"62% of the rate at 4 x 128 tokens, 41% of the rate at 8 x 128"},
		{"dense skipped", []Measure{subject(calibBLASLabel, 0.49), {Label: calibBLASDenseLabel, Skipped: "skipped: no blas"}}, ptr(false),
			"49% of the rate at 4 x 128 tokens"},
		{"issue's shape not measured", []Measure{subject(calibBLASDenseLabel, 0.7)}, nil, "not measured in this run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := calibTarget(&Row{ID: "calib", Measures: tc.measures})
			if got.Value != tc.value || (got.Met == nil) != (tc.met == nil) || (got.Met != nil && *got.Met != *tc.met) {
				t.Errorf("calibTarget = %q met %v, want %q met %v", got.Value, deref(got.Met), tc.value, deref(tc.met))
			}
		})
	}
	if got := calibTarget(nil); got.Met != nil {
		t.Errorf("no calib row judged: %+v", got)
	}
}

func ptr[T any](v T) *T { return &v }

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// TestGPTQShares: the scale-gptq row counts 4/3·K³ + 2·N·K² for the seven weights of a 27B-shaped
// layer (1.37e13, docs/performance-log.md) and reports each build's and the fitted layer's share of the
// reference dgemm rate, in wall time and in CPU time; the target takes the CPU figure.
func TestGPTQShares(t *testing.T) {
	per := layerGPTQFlops(shape27B(1))
	if math.Abs(per-1.36802e13)/1.36802e13 > 1e-5 {
		t.Fatalf("layer GPTQ flops %.6g, want 1.36802e13", per)
	}
	dgemmS := matmulFlops() / 100e9 // a 100 GFLOP/s dgemm, 50 per CPU-second
	r := Row{ID: "scale-gptq", FitUnit: "layer", Measures: []Measure{
		{Label: dgemmLabel, Role: "reference", Samples: []float64{dgemmS, dgemmS / 2, dgemmS}, CPU: []float64{2 * dgemmS, dgemmS, 2 * dgemmS}},
		// 50 GFLOP/s, 25 per CPU-second
		{Label: "cold gptq build, 1 layer(s)", Role: "subject", X: 1, Samples: []float64{per / 50e9}, CPU: []float64{per / 25e9}},
		// the second layer at 80 GFLOP/s and 40 per CPU-second
		{Label: "cold gptq build, 2 layer(s)", Role: "subject", X: 2, Samples: []float64{per/50e9 + per/80e9}, CPU: []float64{per/25e9 + per/40e9}},
	}}
	gptqShares(&r, shape27B(1))
	if g := r.Measures[0].GFLOPS; math.Abs(g-100) > 1e-9 {
		t.Errorf("reference %.6g GFLOP/s, want the median's 100", g)
	}
	if s := r.Measures[1].Share; math.Abs(s-0.5) > 1e-9 {
		t.Errorf("1-layer share %.6g, want 0.5", s)
	}
	if s, want := r.Measures[2].Share, 2*per/(per/50e9+per/80e9)/1e9/100; math.Abs(s-want) > 1e-9 {
		t.Errorf("2-layer share %.6g, want %.6g", s, want)
	}
	if !strings.Contains(r.Note, "= 80% of the dgemm rate") || !strings.Contains(r.Note, "**80% of dgemm's rate per CPU-second**") {
		t.Errorf("note %q does not give the fitted layer's 80%% (wall and CPU)", r.Note)
	}
	if !strings.Contains(r.Measures[1].Extra, "= 50% of dgemm's") {
		t.Errorf("1-layer notes %q, want 50%% of dgemm's CPU rate", r.Measures[1].Extra)
	}
	if s, ok := gptqLayerShare(&r); !ok || math.Abs(s-0.8) > 1e-9 {
		t.Errorf("target's layer share %.6g (%v), want 0.8 from the CPU fit", s, ok)
	}
	one := Row{ID: "scale-gptq", FitUnit: "layer", Measures: r.Measures[:2]}
	gptqShares(&one, shape27B(1))
	if s, ok := gptqLayerShare(&one); !ok || math.Abs(s-0.5) > 1e-9 {
		t.Errorf("one size: target's layer share %.6g (%v), want the 1-layer build's 0.5", s, ok)
	}
	r.Measures[0].Skipped = "skipped: no blas"
	r.Note = ""
	gptqShares(&r, shape27B(1))
	if _, ok := gptqLayerShare(&r); r.Note != "" || ok {
		t.Errorf("a skipped reference still gave a share: %q", r.Note)
	}
}

// TestUsageRecorded: a step with usage records each run's page faults and CPU from the command's
// rusage (real child processes: every one faults in at least its program's pages), keeps a CPU its
// run recorded itself, and the notes print both.
func TestUsageRecorded(t *testing.T) {
	if _, err := exec.LookPath("dd"); err != nil {
		testfiles.Need(t, "dd not on PATH")
	}
	e := &env{ctx: context.Background(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var child, build Measure
	st := e.cmdStep(&child, nil, "dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1")
	st.usage = true
	own := e.cmdStep(&build, nil, "true")
	run := own.run
	own.run = func() (time.Duration, int64, error) { // as buildStep: its run records the CPU itself
		d, rss, err := run()
		build.CPU = append(build.CPU, 42)
		return d, rss, err
	}
	own.usage = true
	if err := e.interleave(2, st, own); err != nil {
		t.Fatal(err)
	}
	if len(child.Faults) != 2 || len(child.CPU) != 2 {
		t.Fatalf("child: faults %v, CPU %v: want one of each per run", child.Faults, child.CPU)
	}
	if child.Faults[0] <= 0 || child.Faults[1] <= 0 || build.Faults[0] <= 0 {
		t.Errorf("page faults %v and %v: a process that ran took none", child.Faults, build.Faults)
	}
	if len(build.Faults) != 2 || len(build.CPU) != 2 || build.CPU[0] != 42 || build.CPU[1] != 42 {
		t.Errorf("a run that records its CPU: faults %v, CPU %v, want its own CPU kept and nothing added", build.Faults, build.CPU)
	}
	if n := notes(child); !strings.Contains(n, "page faults (medians)") || !strings.Contains(n, "CPU ") {
		t.Errorf("notes %q do not show the CPU and page faults", n)
	}
}
