package main

import (
	"bytes"
	"testing"
	"time"

	"orkpipe/pipelines/progress"
)

// TestPlanEstimateStages: plan's estimate line is followed by where the time goes, by stage, the
// longest first; the stages under 1% of the estimate are summed, and an estimate under a second or of
// one stage says nothing more.
func TestPlanEstimateStages(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stages map[string]time.Duration
		want   string
	}{
		{"27B-like", map[string]time.Duration{"calibrate": 109 * time.Minute, "finalize": 76 * time.Minute, "propagate": 33 * time.Minute,
			"tile": 54 * time.Second, "report": 20 * time.Millisecond, "screen": 281 * time.Second},
			"  by stage: calibrate 1h49m, finalize 1h16m, propagate 33m, screen 4m41s, 2 more stages 54s\n"},
		{"a tie by name", map[string]time.Duration{"tile": 2 * time.Second, "finalize": 2 * time.Second}, "  by stage: finalize 2s, tile 2s\n"},
		{"one stage", map[string]time.Duration{"calibrate": time.Hour}, ""},
		{"under a second", map[string]time.Duration{"tile": 400 * time.Millisecond, "finalize": 500 * time.Millisecond}, ""},
	} {
		e := planEstimate{Estimated: progress.Estimated{Stages: tc.stages, OK: true}}
		for _, d := range tc.stages {
			e.Left += d
		}
		var b bytes.Buffer
		e.writeStages(&b)
		if b.String() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, b.String(), tc.want)
		}
	}
}
