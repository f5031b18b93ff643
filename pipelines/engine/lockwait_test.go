package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"orkpipe/pipelines/engine"
)

// TestLockWaitHoldsNoSlot: while another build (a second engine on a second Store of the same
// directory, as another process would be) runs node "locked" and so holds its key's lock, a build
// with the same node waits for that lock without the node's job slot and memory: its three
// independent nodes run meanwhile, with one job slot ("slot") and with a budget the waiting node's
// memory fills ("memory"; before, both builds did nothing until the other finished). Then: the
// other build records the key and the waiting node is a cache hit, run once between the two; or
// the other build is canceled without a record and the waiting node takes its slot and memory
// again and runs; or this build is canceled while its node waits, and it ends. A wait that lasts
// is logged (by the store, at info: -v) while the other nodes have already run.
//
// No timing thresholds: the deadlines only bound a wait that a starved build never ends.
func TestLockWaitHoldsNoSlot(t *testing.T) {
	const (
		recorded       = "holder records"
		holderCanceled = "holder canceled"
		buildCanceled  = "build canceled"
	)
	for _, tc := range []struct {
		starve string // what the waiting node held that the other nodes need
		jobs   int
		budget int64
		end    string
		logged bool // wait for the log of a long lock wait (2 s) before the end
	}{
		{"slot", 1, 1 << 30, recorded, true},
		{"memory", 4, 64 * mib, recorded, false},
		{"slot", 1, 1 << 30, holderCanceled, false},
		{"memory", 4, 64 * mib, buildCanceled, false},
	} {
		t.Run(tc.starve+"/"+tc.end, func(t *testing.T) {
			resetCounts()
			logged := make(chan string, 100)
			if tc.logged { // the stores log to the default logger of when they open
				defer func(l *slog.Logger) { slog.SetDefault(l) }(slog.Default())
				slog.SetDefault(slog.New(slog.NewTextHandler(lineWriter(logged), nil)))
			}
			dir := t.TempDir()
			s, other := openStore(t, dir), openStore(t, dir)
			gate, open := newGate(t)
			// The most memory (the whole "memory" budget) ranks it first for a slot.
			locked := testParams{Tag: "locked", Gate: gate, Mem: 64 * mib}

			hold := engine.NewGraph()
			node(hold, "locked", locked, nil)
			holder := startBuild(t, other, hold)
			started := holder.wait(t, engine.EventNodeStarted, "locked")
			key := started[0].Key

			g := engine.NewGraph()
			node(g, "locked", locked, nil)
			free := []string{"free0", "free1", "free2"}
			for _, id := range free {
				node(g, id, testParams{Mem: mib}, nil)
			}
			b := startBuild(t, s, g, engine.WithJobs(tc.jobs), engine.WithMemoryBudget(tc.budget))
			b.wait(t, engine.EventNodeFinished, free...)
			if ev := b.seen("locked"); len(ev) != 0 {
				t.Fatalf("node locked went on while another build held its key's lock: %+v", ev)
			}
			if tc.logged {
				waitLine(t, logged, "waiting for another build doing the same work")
			}

			var res *engine.Result
			switch tc.end {
			case recorded:
				open()
				if r := holder.result(t); r.err != nil {
					t.Fatalf("holder: %v", r.err)
				}
				r := b.result(t)
				if r.err != nil {
					t.Fatalf("build: %v", r.err)
				}
				res = r.res
				if n := nodeResult(t, res, "locked"); n.Outcome != engine.OutcomeCached || n.Key.String() != key {
					t.Errorf("locked: %v, key %s; want cached, key %s (the holder's record)", n.Outcome, n.Key, key)
				}
				if c := counts()["locked"]; c != 1 {
					t.Errorf("locked ran %d times between the two builds, want 1", c)
				}
			case holderCanceled:
				holder.cancel()
				if r := holder.result(t); !errors.Is(r.err, context.Canceled) {
					t.Fatalf("holder: %v, want context.Canceled", r.err)
				}
				open()
				r := b.result(t)
				if r.err != nil {
					t.Fatalf("build: %v", r.err)
				}
				res = r.res
				if n := nodeResult(t, res, "locked"); n.Outcome != engine.OutcomeExecuted || n.Key.String() != key {
					t.Errorf("locked: %v, key %s; want executed (no record to find), key %s", n.Outcome, n.Key, key)
				}
				if c := counts()["locked"]; c != 2 {
					t.Errorf("locked ran %d times, want 2 (the canceled holder's, then this build's)", c)
				}
			case buildCanceled:
				b.cancel()
				r := b.result(t)
				if !errors.Is(r.err, context.Canceled) {
					t.Fatalf("build canceled while its node waited: %v, want context.Canceled", r.err)
				}
				res = r.res
				if n := nodeResult(t, res, "locked"); n.Outcome != engine.OutcomeSkipped {
					t.Errorf("locked: %v, want skipped (canceled while it waited)", n.Outcome)
				}
				open()
				if r := holder.result(t); r.err != nil {
					t.Fatalf("holder: %v", r.err)
				}
			}
			for _, id := range free {
				if n := nodeResult(t, res, id); n.Outcome != engine.OutcomeExecuted {
					t.Errorf("%s: %v, want executed", id, n.Outcome)
				}
			}
			if res.PeakMemory > tc.budget {
				t.Errorf("peak memory %d, above the budget %d", res.PeakMemory, tc.budget)
			}
		})
	}
}

// running is a build started in the background; its events arrive on events.
type running struct {
	cancel context.CancelFunc
	events chan engine.Event
	done   chan buildResult
	got    []engine.Event // the node events taken from events so far
}

type buildResult struct {
	res *engine.Result
	err error
}

// waitLimit bounds every wait of the lock-wait tests: reached only by a build that never goes on.
const waitLimit = time.Minute

// startBuild builds g on an engine on s (newEngine's options, then opts) in the background; the
// build is canceled and waited for when the test ends.
func startBuild(t *testing.T, s engine.Store, g *engine.Graph, opts ...engine.Option) *running {
	t.Helper()
	r := &running{events: make(chan engine.Event, 1000), done: make(chan buildResult, 1)}
	sink := engine.SinkFunc(func(ev engine.Event) {
		select {
		case r.events <- ev:
		default: // far more events than these graphs make: never block the build on them
		}
	})
	e := newEngine(t, s, append(opts, engine.WithSink(sink))...)
	p, err := e.Plan(g)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		res, err := e.Build(ctx, "lockwait", p, engine.BuildOptions{})
		r.done <- buildResult{res, err}
	}()
	t.Cleanup(func() { cancel(); <-finished }) // before the stores close
	return r
}

// wait takes events until each of ids has had one of kind, and returns those; it fails the test
// if the build ends or waitLimit passes first.
func (r *running) wait(t *testing.T, kind string, ids ...string) []engine.Event {
	t.Helper()
	var out []engine.Event
	timeout := time.After(waitLimit)
	for len(out) < len(ids) {
		select {
		case ev := <-r.events:
			if ev.Node != "" && ev.Event != engine.EventPlan {
				r.got = append(r.got, ev)
			}
			if ev.Event == kind && slices.Contains(ids, ev.Node) {
				out = append(out, ev)
			}
		case <-timeout:
			t.Fatalf("after %v: %d of %s %s; the build is starved (node events so far: %s)", waitLimit, len(out), strings.Join(ids, ","), kind, r.trace())
		}
	}
	return out
}

// seen returns the node events of id taken so far.
func (r *running) seen(id string) []engine.Event {
	var out []engine.Event
	for _, ev := range r.got {
		if ev.Node == id {
			out = append(out, ev)
		}
	}
	return out
}

func (r *running) trace() string {
	var s []string
	for _, ev := range r.got {
		s = append(s, fmt.Sprintf("%s %s", ev.Event, ev.Node))
	}
	return strings.Join(s, "; ")
}

// lineWriter sends what is written to it (a log line a Write) on ch, dropping it if ch is full.
type lineWriter chan<- string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default:
	}
	return len(p), nil
}

// waitLine waits (at most waitLimit) for a line containing want.
func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	timeout := time.After(waitLimit)
	for {
		select {
		case l := <-lines:
			if strings.Contains(l, want) {
				t.Logf("logged: %s", strings.TrimSpace(l))
				return
			}
		case <-timeout:
			t.Fatalf("no %q logged within %v", want, waitLimit)
		}
	}
}

// result waits for the build to end (at most waitLimit).
func (r *running) result(t *testing.T) buildResult {
	t.Helper()
	select {
	case res := <-r.done:
		r.done <- res // for the next call
		return res
	case <-time.After(waitLimit):
		t.Fatalf("the build did not end within %v (node events so far: %s)", waitLimit, r.trace())
		return buildResult{}
	}
}
