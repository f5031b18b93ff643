package progress_test

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// countingWriter counts Write calls.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestJSONBuffersBursts: a burst of plan and node_cached events is not written line by line, a
// node_started event writes everything before it at once, and Close writes the rest.
func TestJSONBuffersBursts(t *testing.T) {
	var w countingWriter
	s := progress.NewJSON(&w)
	for i := range 500 {
		s.Emit(engine.Event{Event: engine.EventPlan, Node: fmt.Sprint("n", i)})
	}
	s.Emit(engine.Event{Event: engine.EventNodeStarted, Node: "n0"})
	if got := strings.Count(w.String(), "\n"); got != 501 {
		t.Fatalf("after node_started: %d lines written, want 501", got)
	}
	if w.writes >= 100 {
		t.Errorf("501 lines took %d writes", w.writes)
	}
	s.Emit(engine.Event{Event: engine.EventNodeCached, Node: "n1"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 502 || !strings.Contains(lines[501], `"node_cached"`) || !strings.Contains(lines[500], `"node_started"`) {
		t.Errorf("after Close: %d lines, last two %q", len(lines), lines[len(lines)-2:])
	}
}
