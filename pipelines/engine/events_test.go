package engine_test

import (
	"testing"
	"time"

	"orkpipe/pipelines/engine"
)

// TestEvents: one plan event per node first, then for every node exactly one of node_cached,
// node_finished or node_failed (node_started before the last two), and a summary last whose
// counts match the Result — in a cold build and in a warm one (where only the failing node runs).
func TestEvents(t *testing.T) {
	s := openStore(t, t.TempDir())
	for _, round := range []struct {
		name     string
		executed int
	}{{"cold", 6}, {"warm", 0}} {
		rec := &engine.Recorder{}
		e := newEngine(t, s, engine.WithSink(rec), engine.WithKeepGoing(true))
		g := sixNodes("x")
		bad := node(g, "bad", testParams{Fail: true}, nil)
		node(g, "after-bad", testParams{}, map[string]engine.Input{"in": bad.Output("out")})
		res, _ := build(t, t.Context(), e, "events", g, engine.BuildOptions{})
		evs := rec.Events()
		nodes := len(g.Nodes())
		for i := range nodes {
			if evs[i].Event != engine.EventPlan {
				t.Fatalf("event %d is %s, want the %d plan events first", i, evs[i].Event, nodes)
			}
		}
		started, ended := map[string]bool{}, map[string]string{}
		for _, ev := range evs[nodes : len(evs)-1] {
			switch ev.Event {
			case engine.EventNodeStarted:
				started[ev.Node] = true
			case engine.EventNodeFinished, engine.EventNodeFailed, engine.EventNodeCached:
				if prev, dup := ended[ev.Node]; dup {
					t.Errorf("node %s ended twice (%s, %s)", ev.Node, prev, ev.Event)
				}
				if ev.Event != engine.EventNodeCached && !started[ev.Node] && ev.Key != "" {
					t.Errorf("node %s: %s without node_started", ev.Node, ev.Event)
				}
				ended[ev.Node] = ev.Event
			default:
				t.Errorf("unexpected event %s in the middle", ev.Event)
			}
		}
		sum := evs[len(evs)-1].Summary
		if sum == nil || sum.Executed != res.Executed || sum.Cached != res.Cached || sum.Failed != 1 || sum.Skipped != 1 ||
			sum.Executed+sum.Cached+sum.Failed+sum.Skipped != nodes {
			t.Errorf("summary %+v does not match the result (executed %d cached %d)", sum, res.Executed, res.Cached)
		}
		if len(ended) != nodes-1 { // after-bad is skipped: no event of its own
			t.Errorf("%d nodes ended, want %d", len(ended), nodes-1)
		}
		if res.Executed != round.executed {
			t.Errorf("%s build executed %d, want %d", round.name, res.Executed, round.executed)
		}
	}
}

// TestVerifyingEvent: with a verify notice of 0 every executed node that reads other nodes' outputs
// gets node_verifying, naming its input objects' total size, before its node_started, and a node
// without such inputs gets none; a negative notice is refused.
func TestVerifyingEvent(t *testing.T) {
	if _, err := engine.New(openStore(t, t.TempDir()), engine.WithMemoryBudget(1<<30), engine.WithVerifyNotice(-time.Second)); err == nil {
		t.Error("WithVerifyNotice(-1s) accepted")
	}
	rec := &engine.Recorder{}
	e := newEngine(t, openStore(t, t.TempDir()), engine.WithSink(rec), engine.WithVerifyNotice(0))
	if _, err := build(t, t.Context(), e, "verifying", sixNodes("v"), engine.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	verifying := map[string]int64{}
	for _, ev := range rec.Events() {
		switch ev.Event {
		case engine.EventNodeVerifying:
			verifying[ev.Node] = ev.Bytes
		case engine.EventNodeStarted:
			if _, ok := verifying[ev.Node]; !ok && ev.Node != "a" && ev.Node != "b" {
				t.Errorf("node %s started without node_verifying before it", ev.Node)
			}
		}
	}
	// a and b read no node's output; x reads a's output and w b's (the same size: at least the 4096
	// bytes their params ask for); z reads b's and y's
	for _, n := range []string{"a", "b"} {
		if b, ok := verifying[n]; ok {
			t.Errorf("node %s (no inputs from nodes): node_verifying of %d bytes", n, b)
		}
	}
	if verifying["x"] < 4096 || verifying["w"] != verifying["x"] || verifying["z"] <= verifying["w"] {
		t.Errorf("node_verifying bytes x %d, w %d, z %d: want x = w >= 4096 and z > w", verifying["x"], verifying["w"], verifying["z"])
	}
	if verifying["y"] <= 0 {
		t.Errorf("node y: node_verifying of %d bytes, want > 0", verifying["y"])
	}
}
