package progress

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/stages/reporthtml"
)

// TimelineRecorder is an engine.Sink that keeps what the timeline of one build needs: when it
// started (its plan events), each node's declared memory and stage (plan), start (node_started)
// and end (node_finished, node_failed), and the closing counts (summary).
type TimelineRecorder struct {
	mu      sync.Mutex
	start   time.Time
	mem     map[string]int64
	stage   map[string]string
	started map[string]time.Time
	nodes   []reporthtml.TimedNode
	summary *engine.Summary
	end     time.Time
}

// NewTimelineRecorder returns an empty recorder.
func NewTimelineRecorder() *TimelineRecorder {
	return &TimelineRecorder{mem: map[string]int64{}, stage: map[string]string{}, started: map[string]time.Time{}}
}

// Emit records e.
func (r *TimelineRecorder) Emit(e engine.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Event {
	case engine.EventPlan:
		if r.start.IsZero() || e.Time.Before(r.start) {
			r.start = e.Time
		}
		r.mem[e.Node], r.stage[e.Node] = e.Mem, e.Stage
	case engine.EventNodeStarted:
		r.started[e.Node] = e.Time
	case engine.EventNodeFinished, engine.EventNodeFailed:
		began, ok := r.started[e.Node]
		if !ok {
			return // failed before it started (its key could not be computed): nothing ran
		}
		delete(r.started, e.Node)
		r.nodes = append(r.nodes, reporthtml.TimedNode{ID: e.Node, Stage: r.stage[e.Node], Start: began.Sub(r.start), End: e.Time.Sub(r.start),
			Mem: r.mem[e.Node], Failed: e.Event == engine.EventNodeFailed})
	case engine.EventSummary:
		s := *e.Summary
		r.summary, r.end = &s, e.Time
	}
}

// Timeline returns the recorded build of target as run with jobs slots under the budget (bytes).
// Before the summary arrives the counts are those of the nodes seen so far.
func (r *TimelineRecorder) Timeline(target string, jobs int, budget int64) *reporthtml.Timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &reporthtml.Timeline{Target: target, Start: r.start, Jobs: jobs, Budget: budget, Nodes: append([]reporthtml.TimedNode(nil), r.nodes...)}
	for _, n := range r.nodes {
		t.Duration = max(t.Duration, n.End)
	}
	if s := r.summary; s != nil {
		t.Executed, t.Cached, t.Failed, t.Skipped, t.Error = s.Executed, s.Cached, s.Failed, s.Skipped, s.Error
		t.Duration = max(t.Duration, time.Duration(s.DurationMS)*time.Millisecond)
	} else {
		for _, n := range r.nodes {
			if n.Failed {
				t.Failed++
			} else {
				t.Executed++
			}
		}
	}
	return t
}

// WriteTimeline renders t into dir/reporthtml.TimelineFile (created or replaced whole: written to a
// temporary file first) and returns its path. dir is created if missing.
func WriteTimeline(dir string, t *reporthtml.Timeline) (string, error) {
	page, err := reporthtml.RenderTimeline(t)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, reporthtml.TimelineFile)
	if err := writeFile(path, page); err != nil {
		return "", fmt.Errorf("writing the build timeline %s: %w", path, err)
	}
	return path, nil
}

// writeFile creates or replaces path whole with data, mode 0644: written to a hidden temporary file in
// its directory (created if missing), then renamed. The temporary file is locked while written
// (artifacts.CreateTemp): one a killed build left (the timeline is written beside a build's outputs,
// in the user's directory) is removed by the next writer into that directory.
func writeFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, name, err := artifacts.CreateTemp(path)
	if err != nil {
		return err
	}
	defer tmp.Close()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		os.Remove(name)
	}
	return err
}
