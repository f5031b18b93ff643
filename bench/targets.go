package main

import (
	"fmt"
	"strings"
)

// targets checks the acceptance targets against the figures of rep.
func targets(rep *Report) []Target {
	find := func(id string) *Row {
		for i := range rep.Rows {
			if rep.Rows[i].ID == id && rep.Rows[i].Skipped == "" {
				return &rep.Rows[i]
			}
		}
		return nil
	}
	ratioOf := func(id, label string) (float64, bool) {
		r := find(id)
		if r == nil {
			return 0, false
		}
		m := r.measure(label)
		if m == nil || m.Ratio == 0 {
			return 0, false
		}
		return m.Ratio, true
	}
	check := func(goal string, ok, met bool, value string) Target {
		t := Target{Goal: goal, Value: "not measured in this run"}
		if ok {
			t.Value, t.Met = value, &met
		}
		return t
	}
	var ts []Target
	x, ok := ratioOf("hash", "b3sum")
	ts = append(ts, check("hashing >= 1.0x b3sum throughput", ok, ok && 1/x >= 1.0, fmt.Sprintf("%.2fx b3sum's throughput", 1/x)))
	x, ok = ratioOf("cas", "cp")
	ts = append(ts, check("CAS ingest + materialize <= 1.5x cp", ok, x <= 1.5, fmt.Sprintf("%.2fx cp", x)))
	x, ok = ratioOf("noop", "cold build")
	ts = append(ts, check("no-op rebuild < 2% of the cold build", ok, x < 0.02, fmt.Sprintf("%.2f%% of cold", 100*x)))
	x, ok = ratioOf("pull", "cp")
	ts = append(ts, check("pull <= 2x cp", ok, x <= 2, fmt.Sprintf("%.2fx cp", x)))
	if r := find("rtn"); r != nil {
		for _, c := range []struct {
			label, goal string
			time, rss   float64 // limits (rss 0: not a goal)
		}{
			{"orkpipe build (cold), clip search", "RTN build with clip search <= 1.0x llama-quantize Q4_0's time and peak RSS", 1, 1},
			{"orkpipe build (cold), clip_grid [1.0]", "RTN build without clip search <= 0.5x llama-quantize Q4_0's time", 0.5, 0},
		} {
			m := r.measure(c.label)
			ok := m != nil && m.VsTime > 0 && (c.rss == 0 || m.VsRSS > 0)
			var value string
			met := false
			if ok {
				value = fmt.Sprintf("%.3gx its time", m.VsTime)
				met = m.VsTime <= c.time
				if c.rss > 0 {
					value += fmt.Sprintf(", %.3gx its peak RSS", m.VsRSS)
					met = met && m.VsRSS <= c.rss
				}
			}
			ts = append(ts, check(c.goal, ok, met, value))
		}
	}
	ts = append(ts, calibTarget(find("calib")))
	share, ok := gptqLayerShare(find("scale-gptq"))
	ts = append(ts, check("GPTQ >= 80% of the dgemm rate over a whole 27B-shaped layer (scale-gptq)", ok, share >= 0.8,
		fmt.Sprintf("%.0f%% of the dgemm rate, in CPU time", 100*share)))
	// Peak RSS: every build measured with a --mem budget in this run.
	worst, n, over := 0.0, 0, 0
	for _, r := range rep.Rows {
		for _, m := range r.Measures {
			if m.Budget > 0 && m.PeakRSS > 0 {
				n++
				f := float64(m.PeakRSS) / float64(m.Budget)
				worst = max(worst, f)
				if m.PeakRSS > m.Budget {
					over++
				}
			}
		}
	}
	ts = append(ts, check("peak RSS under --mem in every build", n > 0, over == 0,
		fmt.Sprintf("%d build measures, highest peak RSS %.0f%% of its --mem, %d over", n, 100*worst, over)))
	if find("rss") == nil && len(ts) > 0 {
		ts[len(ts)-1].Why = "the 27B-shaped GPTQ rows (rss) did not run"
	}
	return ts
}

// calibTarget judges the calib row's -tags blas subjects: the 4 x 128 tokens and, when the row
// measured it, 8 x 128 (the dense-Hessian path of real recipes); the goal is met only if every measured
// shape reaches half the sgemm/dgemm rate.
func calibTarget(c *Row) Target {
	t := Target{Goal: "calibrate of a 27B-shaped layer (-tags blas) >= 50% of the sgemm/dgemm rate", Value: "not measured in this run"}
	if c == nil {
		return t
	}
	var parts []string
	met := true
	for _, s := range []struct{ label, shape string }{{calibBLASLabel, "4 x 128 tokens"}, {calibBLASDenseLabel, "8 x 128"}} {
		m := c.measure(s.label)
		if m == nil || m.Share <= 0 {
			if s.label == calibBLASLabel {
				return t // the shape is the target; without it nothing is judged
			}
			continue
		}
		parts = append(parts, fmt.Sprintf("%.0f%% of the rate at %s", 100*m.Share, s.shape))
		met = met && m.Share >= 0.5
	}
	t.Value, t.Met = strings.Join(parts, ", "), &met
	return t
}
