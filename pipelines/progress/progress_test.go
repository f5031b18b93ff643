package progress_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/progress"
)

func TestJSONLines(t *testing.T) {
	var buf bytes.Buffer
	s := progress.Choose(&buf, true, nil)
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
	s := progress.Choose(&buf, false, nil) // a buffer is not a terminal: plain lines
	s.Emit(engine.Event{Event: engine.EventPlan, Node: "a"})
	s.Emit(engine.Event{Event: engine.EventNodeVerifying, Node: "a", Key: "blake3:0123456789abcdef", Bytes: 3 << 30})
	s.Emit(engine.Event{Event: engine.EventNodeFailed, Node: "a", Key: "blake3:0123456789abcdef", Error: "boom"})
	s.Close()
	if got := buf.String(); !strings.Contains(got, "verifying a") || !strings.Contains(got, "(3.00 GiB)") || !strings.Contains(got, "FAILED") ||
		!strings.Contains(got, "boom") || strings.Count(got, "\n") != 2 {
		t.Errorf("text output %q", got)
	}
}

// TestTextLinesETA: a finished node's line ends with the time left once a node of its kind has run,
// as a lower bound while a remaining node's stage has not.
func TestTextLinesETA(t *testing.T) {
	var buf bytes.Buffer
	s := progress.Choose(&buf, false, nil)
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"calibrate[0,1)", "calibrate[1,2)", "calibrate[2,3)"} {
		s.Emit(engine.Event{Event: engine.EventPlan, Node: id, Stage: "calibrate", Time: t0})
	}
	s.Emit(engine.Event{Event: engine.EventPlan, Node: "screen", Stage: "screen", Time: t0})
	for i, id := range []string{"calibrate[0,1)", "calibrate[1,2)", "calibrate[2,3)"} {
		start := t0.Add(time.Duration(i) * 100 * time.Second)
		s.Emit(engine.Event{Event: engine.EventNodeStarted, Node: id, Key: "blake3:0123456789abcdef", Stage: "calibrate", Time: start})
		s.Emit(engine.Event{Event: engine.EventNodeFinished, Node: id, Key: "blake3:0123456789abcdef", Stage: "calibrate", Time: start.Add(100 * time.Second), DurationMS: 100e3})
	}
	s.Emit(engine.Event{Event: engine.EventNodeStarted, Node: "screen", Key: "blake3:0123456789abcdef", Stage: "screen", Time: t0.Add(300 * time.Second)})
	s.Emit(engine.Event{Event: engine.EventNodeFinished, Node: "screen", Key: "blake3:0123456789abcdef", Stage: "screen", Time: t0.Add(310 * time.Second), DurationMS: 10e3})
	s.Close()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.HasPrefix(l, "finished") {
			lines = append(lines, l)
		}
	}
	// After the last window only screen is left, untimed: no estimate (not ">= 0s").
	want := []string{"in 1m40s (>= 3m20s left)", "in 1m40s (>= 1m40s left)", "in 1m40s", "in 10s"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %q", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d %q: want it to end with %q", i, lines[i], w)
		}
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
	s := progress.NewJSON(&w, nil)
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

// TestJSONLinesAreEncodingJSONs: each event's line is what encoding/json writes for the Event
// struct's fields without HTML escaping (the sink encodes with Event.AppendJSON), the summary's
// its Summary.
func TestJSONLinesAreEncodingJSONs(t *testing.T) {
	type plain engine.Event // the fields and tags, not the methods
	evs := []engine.Event{
		{Event: engine.EventPlan, Node: "rtn-tile:blk.0.attn_q.weight", Stage: "rtn-tile", Time: time.Unix(1796200480, 306868363).UTC(), Mem: 81958912, Deps: []string{"a", "b"}},
		{Event: engine.EventNodeCached, Node: "n<&>\u2028\xff\"", Key: "blake3:00", Stage: "s", Time: time.Now(), SameAs: "m", Outputs: map[string]string{"z": "1", "a": "2"}},
		{Event: engine.EventNodeFailed, Node: "x", DurationMS: 3, Error: "boom\n"},
		{Event: engine.EventSummary, Summary: &engine.Summary{Event: engine.EventSummary, Target: "t", Outputs: map[string]string{"pack": "p"}}},
	}
	var got, want bytes.Buffer
	s := progress.NewJSON(&got, nil)
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	for _, e := range evs {
		s.Emit(e)
		var err error
		if e.Summary != nil {
			err = enc.Encode(e.Summary)
		} else {
			err = enc.Encode(plain(e))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("lines:\n%s\nwant:\n%s", got.String(), want.String())
	}
}

// TestJSONLeftMS: a node_finished line carries the estimate of the time left (left_ms, left_lower for
// a lower bound) once there is one, and is otherwise encoding/json's line of the event.
func TestJSONLeftMS(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	eta := progress.NewETA()
	eta.Prime([]progress.KindCost{{Stage: "s", Kind: "a#", Mean: 10 * time.Second, Nodes: 3}})
	var buf bytes.Buffer
	s := progress.NewJSON(&buf, eta)
	for _, id := range []string{"a0", "a1"} {
		s.Emit(engine.Event{Event: engine.EventPlan, Node: id, Stage: "s", Time: t0})
	}
	s.Emit(engine.Event{Event: engine.EventPlan, Node: "z", Stage: "zz", Time: t0})
	ev := func(kind, id string, sec int) engine.Event {
		e := engine.Event{Event: kind, Node: id, Stage: "s", Time: t0.Add(time.Duration(sec) * time.Second)}
		if kind == engine.EventNodeFinished {
			e.DurationMS = 4000
		}
		s.Emit(e)
		return e
	}
	ev(engine.EventNodeStarted, "a0", 0)
	ev(engine.EventNodeFinished, "a0", 4) // a1 as a0 (4 s); z's stage untimed
	ev(engine.EventNodeStarted, "a1", 4)
	last := ev(engine.EventNodeFinished, "a1", 8) // only z is left: no estimate
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7:\n%s", len(lines), buf.String())
	}
	var fin map[string]any
	if err := json.Unmarshal([]byte(lines[4]), &fin); err != nil {
		t.Fatalf("line %q: %v", lines[4], err)
	}
	if fin["left_ms"] != 4000.0 || fin["left_lower"] != true || !strings.HasSuffix(lines[4], `,"left_ms":4000,"left_lower":true}`) {
		t.Errorf("a0's node_finished line %s: want left_ms 4000 and left_lower true at its end", lines[4])
	}
	type plain engine.Event
	want, err := json.Marshal(plain(last))
	if err != nil {
		t.Fatal(err)
	}
	if lines[6] != string(want) {
		t.Errorf("a1's node_finished line %s, want %s", lines[6], want)
	}
}
