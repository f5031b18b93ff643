package progress_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/progress"
)

func TestJSONLines(t *testing.T) {
	var buf bytes.Buffer
	s := progress.Choose(&buf, true)
	s.Emit(engine.Event{Event: engine.EventNodeCached, Node: "a", Key: "blake3:00", Stage: "x"})
	s.Emit(engine.Event{Event: engine.EventSummary, Summary: &engine.Summary{Event: "summary", Target: "t", Executed: 1, Outputs: map[string]string{"o": "/p"}}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var ev, sum map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil || ev["event"] != "node_cached" || ev["node"] != "a" || ev["key"] != "blake3:00" {
		t.Errorf("node event %s (%v)", lines[0], err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &sum); err != nil || sum["event"] != "summary" || sum["executed"] != 1.0 || sum["skipped"] != 0.0 {
		t.Errorf("summary %s (%v)", lines[1], err)
	}
	if _, ok := sum["node"]; ok {
		t.Errorf("summary carries a node field: %s", lines[1])
	}
}

func TestTextLines(t *testing.T) {
	var buf bytes.Buffer
	s := progress.Choose(&buf, false) // a buffer is not a terminal: plain lines
	s.Emit(engine.Event{Event: engine.EventPlan, Node: "a"})
	s.Emit(engine.Event{Event: engine.EventNodeFailed, Node: "a", Key: "blake3:0123456789abcdef", Error: "boom"})
	s.Close()
	if got := buf.String(); !strings.Contains(got, "FAILED") || !strings.Contains(got, "boom") || strings.Count(got, "\n") != 1 {
		t.Errorf("text output %q", got)
	}
}
