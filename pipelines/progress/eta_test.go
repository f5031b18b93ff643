package progress

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"orkpipe/pipelines/engine"
)

func TestNodeClass(t *testing.T) {
	for id, want := range map[string]string{
		"finalize:blk.12.ffn_down.weight":      "finalize:blk.#.ffn_down.weight",
		"calibrate[0,1)":                       "calibrate[#,#)",
		"finalize:blk.2.ffn_up_exps.weight#31": "finalize:blk.#.ffn_up_exps.weight##",
		"screen":                               "screen",
		"":                                     "",
	} {
		if got := nodeClass(id); got != want {
			t.Errorf("nodeClass(%q) = %q, want %q", id, got, want)
		}
	}
}

// etaClock feeds an ETA events at times counted in seconds from a fixed start.
type etaClock struct {
	t     *testing.T
	eta   *ETA
	start time.Time
}

func newETAClock(t *testing.T) *etaClock {
	return &etaClock{t: t, eta: NewETA(), start: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
}

func (c *etaClock) at(s float64) time.Time {
	return c.start.Add(time.Duration(s * float64(time.Second)))
}

func (c *etaClock) plan(stage, id string, deps ...string) {
	c.eta.Emit(engine.Event{Event: engine.EventPlan, Node: id, Stage: stage, Deps: deps, Time: c.start})
}

func (c *etaClock) ev(kind, stage, id string, s float64) {
	c.eta.Emit(engine.Event{Event: kind, Node: id, Stage: stage, Time: c.at(s)})
}

// left asserts the estimate at s seconds.
func (c *etaClock) left(s, want float64, wantLower bool) {
	c.t.Helper()
	got, lower, ok := c.eta.Left(c.at(s))
	if !ok {
		c.t.Fatalf("at %vs: no estimate, want %vs", s, want)
	}
	if d := got - time.Duration(want*float64(time.Second)); d < -time.Millisecond || d > time.Millisecond || lower != wantLower {
		c.t.Errorf("at %vs: %v left (lower bound %v), want %vs (lower bound %v)", s, got, lower, want, wantLower)
	}
}

// A windowed build: per block a calibrate window alone (100 s), two finalize nodes side by side
// (40 s each: 20 s of wall time each), then the window's propagate alone (30 s); the last block has no
// propagate, and a pack node ends the build.
func TestETAWindowedBuild(t *testing.T) {
	c := newETAClock(t)
	const blocks = 3
	prev := ""
	for b := range blocks {
		cal := fmt.Sprintf("calibrate[%d,%d)", b, b+1)
		c.plan("calibrate", cal, prev)
		for _, w := range []string{"ffn_down", "ffn_up"} {
			c.plan("finalize", fmt.Sprintf("finalize:blk.%d.%s.weight", b, w), cal)
		}
		if b < blocks-1 {
			prev = fmt.Sprintf("propagate[%d,%d)", b, b+1)
			c.plan("propagate", prev, fmt.Sprintf("finalize:blk.%d.ffn_down.weight", b), fmt.Sprintf("finalize:blk.%d.ffn_up.weight", b))
		}
	}
	c.plan("write-orkpack", "write-orkpack", "finalize:blk.2.ffn_down.weight", "finalize:blk.2.ffn_up.weight")
	if _, _, ok := c.eta.Left(c.at(0)); ok {
		t.Fatal("an estimate before any node finished")
	}
	c.ev(engine.EventNodeStarted, "calibrate", "calibrate[0,1)", 0)
	if _, _, ok := c.eta.Left(c.at(50)); ok {
		t.Fatal("an estimate before any node finished")
	}
	c.ev(engine.EventNodeFinished, "calibrate", "calibrate[0,1)", 100)
	// Two more calibrate windows are known (200 s); finalize, propagate and write-orkpack are not yet.
	c.left(100, 200, true)
	c.ev(engine.EventNodeStarted, "finalize", "finalize:blk.0.ffn_down.weight", 100)
	c.ev(engine.EventNodeStarted, "finalize", "finalize:blk.0.ffn_up.weight", 100)
	c.ev(engine.EventNodeFinished, "finalize", "finalize:blk.0.ffn_down.weight", 140)
	// ffn_up ran 40 s beside ffn_down: it has 20 s of its share behind it, its class no sample yet
	// (the stage's mean share, 20 s: nothing left of it); ffn_down 20 s a block, ffn_up 20 s (stage).
	c.left(140, 200+2*20+2*20, true)
	c.ev(engine.EventNodeFinished, "finalize", "finalize:blk.0.ffn_up.weight", 140)
	c.ev(engine.EventNodeStarted, "propagate", "propagate[0,1)", 140)
	// Halfway through the first propagate: 15 s into it, its stage still untimed.
	c.left(155, 200+2*40, true)
	c.ev(engine.EventNodeFinished, "propagate", "propagate[0,1)", 170)
	c.left(170, 200+2*40+30, true) // one propagate left; write-orkpack still untimed
	c.ev(engine.EventNodeStarted, "calibrate", "calibrate[1,2)", 170)
	c.left(220, 50+100+2*40+30, true) // calibrate[1,2) halfway
	c.left(300, 100+2*40+30, true)    // calibrate[1,2) over its estimate: nothing left of it
	c.ev(engine.EventNodeFinished, "calibrate", "calibrate[1,2)", 300)
	finalize := func(b int, s float64) {
		for _, w := range []string{"ffn_down", "ffn_up"} {
			c.ev(engine.EventNodeStarted, "finalize", fmt.Sprintf("finalize:blk.%d.%s.weight", b, w), s)
		}
		for _, w := range []string{"ffn_down", "ffn_up"} {
			c.ev(engine.EventNodeFinished, "finalize", fmt.Sprintf("finalize:blk.%d.%s.weight", b, w), s+40)
		}
	}
	finalize(1, 300)
	c.ev(engine.EventNodeStarted, "propagate", "propagate[1,2)", 340)
	c.ev(engine.EventNodeFinished, "propagate", "propagate[1,2)", 370)
	c.left(370, (100+130)/2+2*20, true) // calibrate[1,2) ran 130 s: the class mean is 115 s
	c.ev(engine.EventNodeStarted, "calibrate", "calibrate[2,3)", 370)
	c.ev(engine.EventNodeFinished, "calibrate", "calibrate[2,3)", 470)
	finalize(2, 470)
	c.left(510, 0, true) // only write-orkpack, untimed
	c.ev(engine.EventNodeStarted, "write-orkpack", "write-orkpack", 510)
	c.ev(engine.EventNodeFinished, "write-orkpack", "write-orkpack", 515)
	if left, _, ok := c.eta.Left(c.at(515)); ok {
		t.Errorf("an estimate (%v) with every node done", left)
	}
}

// Cached nodes cost nothing, a failed node's dependents never run, and a class with no finished node
// takes its stage's mean.
func TestETACachedFailedStage(t *testing.T) {
	c := newETAClock(t)
	c.plan("finalize", "finalize:blk.0.attn_q.weight")
	c.plan("finalize", "finalize:blk.0.attn_k.weight")
	c.plan("finalize", "finalize:blk.1.attn_k.weight")
	c.plan("finalize", "finalize:blk.0.attn_v.weight")
	c.plan("tile", "tile:blk.0.attn_v.weight", "finalize:blk.0.attn_v.weight")
	c.plan("write-orkpack", "write-orkpack", "tile:blk.0.attn_v.weight")
	c.plan("finalize", "finalize:blk.1.attn_v.weight")
	c.ev(engine.EventNodeCached, "finalize", "finalize:blk.0.attn_q.weight", 0)
	c.ev(engine.EventNodeStarted, "finalize", "finalize:blk.0.attn_k.weight", 0)
	c.ev(engine.EventNodeFinished, "finalize", "finalize:blk.0.attn_k.weight", 12)
	// attn_k of block 1: 12 s (its class); attn_v twice: the stage's 12 s; tile and write-orkpack untimed.
	c.left(12, 36, true)
	c.ev(engine.EventNodeStarted, "finalize", "finalize:blk.0.attn_v.weight", 12)
	c.ev(engine.EventNodeFailed, "finalize", "finalize:blk.0.attn_v.weight", 13)
	// The tile and write-orkpack depend on the failed node: no untimed node is left.
	c.left(13, 24, false)
	if got := c.eta.String(c.at(13)); got != "~24s left" {
		t.Errorf("String = %q, want ~24s left", got)
	}
}

func TestRoundLeft(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                               "0s",
		1499 * time.Millisecond:         "1s",
		9*time.Minute + 59*time.Second:  "9m59s",
		10*time.Minute + 29*time.Second: "10m",
		9*time.Minute + 59*time.Second + 600*time.Millisecond: "10m",
		59*time.Minute + 29*time.Second:                       "59m",
		59*time.Minute + 40*time.Second:                       "1h00m",
		time.Hour:                                             "1h00m",
		3*time.Hour + 11*time.Minute + 31*time.Second:         "3h12m",
	} {
		if got := RoundLeft(d); got != want {
			t.Errorf("RoundLeft(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestAbout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "under a second",
		999 * time.Millisecond:  "under a second",
		time.Second:             "~1s",
		1499 * time.Millisecond: "~1s",
		3*time.Hour + 11*time.Minute + 31*time.Second: "~3h12m",
	} {
		if got := About(d); got != want {
			t.Errorf("About(%v) = %q, want %q", d, got, want)
		}
	}
}

// An earlier build's costs estimate the kinds this build has not timed yet — a kind's own cost before
// this build's stage mean —, scaled by how long this build's finished nodes took against the earlier
// build's means for their kinds.
func TestETAPrimed(t *testing.T) {
	c := newETAClock(t)
	c.eta.Prime([]KindCost{
		{Stage: "calibrate", Kind: "calibrate[#,#)", Mean: 50 * time.Second, Nodes: 2},
		{Stage: "finalize", Kind: "finalize:blk.#.ffn_down.weight", Mean: 10 * time.Second, Nodes: 2},
		{Stage: "finalize", Kind: "finalize:blk.#.attn_q.weight", Mean: 40 * time.Second, Nodes: 1},
		{Stage: "write-orkpack", Kind: "write-orkpack", Mean: 4 * time.Second, Nodes: 1},
	})
	c.plan("calibrate", "calibrate[0,1)")
	c.plan("calibrate", "calibrate[1,2)")
	for b := range 2 {
		c.plan("finalize", fmt.Sprintf("finalize:blk.%d.ffn_down.weight", b))
		c.plan("finalize", fmt.Sprintf("finalize:blk.%d.ffn_up.weight", b))
	}
	c.plan("finalize", "finalize:blk.0.attn_q.weight")
	c.plan("propagate", "propagate[0,1)")
	c.plan("write-orkpack", "write-orkpack")
	// Before anything ran: calibrate 2 x 50 s, ffn_down 2 x 10 s, ffn_up (a kind the earlier build did
	// not run) 2 x its finalize mean of (2 x 10 + 40) / 3 = 20 s, attn_q 40 s, write-orkpack 4 s;
	// propagate's stage never ran.
	c.left(0, 204, true)
	c.ev(engine.EventNodeStarted, "calibrate", "calibrate[0,1)", 0)
	c.left(30, 174, true)
	c.ev(engine.EventNodeFinished, "calibrate", "calibrate[0,1)", 100)
	// calibrate took twice its earlier mean: the other kinds' earlier costs count (100 + 10) / (50 + 10)
	// times (scaleSteady, 10 s, at face value).
	scale := 110.0 / 60
	c.left(100, 100+scale*(2*10+2*20+40+4), true)
	for _, w := range []string{"ffn_down", "ffn_up"} {
		c.ev(engine.EventNodeStarted, "finalize", "finalize:blk.0."+w+".weight", 100)
	}
	for _, w := range []string{"ffn_down", "ffn_up"} {
		c.ev(engine.EventNodeFinished, "finalize", "finalize:blk.0."+w+".weight", 120)
	}
	// 10 s each. The scale is (100 + 10 + 10) / (50 + 10 + 10) (ffn_up had no earlier cost); attn_q
	// keeps its own earlier cost, scaled, rather than this build's finalize mean.
	scale = 120.0 / 70
	c.left(120, 100+10+10+40*scale+4*scale, true)
	c.ev(engine.EventNodeStarted, "propagate", "propagate[0,1)", 120)
	c.ev(engine.EventNodeFinished, "propagate", "propagate[0,1)", 150)
	c.left(150, 100+10+10+40*scale+4*scale, false)
	if got := c.eta.String(c.at(150)); got != "~3m15s left" {
		t.Errorf("String = %q, want ~3m15s left", got)
	}
	measured := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	want := []KindCost{
		{Stage: "calibrate", Kind: "calibrate[#,#)", Mean: 100 * time.Second, Nodes: 1, Measured: measured},
		{Stage: "finalize", Kind: "finalize:blk.#.ffn_down.weight", Mean: 10 * time.Second, Nodes: 1, Measured: measured},
		{Stage: "finalize", Kind: "finalize:blk.#.ffn_up.weight", Mean: 10 * time.Second, Nodes: 1, Measured: measured},
		{Stage: "propagate", Kind: "propagate[#,#)", Mean: 30 * time.Second, Nodes: 1, Measured: measured},
	}
	if got := c.eta.Costs(measured); !reflect.DeepEqual(got, want) {
		t.Errorf("Costs:\n%v\nwant\n%v", got, want)
	}
}

// A build's first nodes, estimated by their modeled costs from its start: over the cores at first,
// then at the rate the build measures (for the stage; for a stage not timed yet, the rate over every
// stage of the same size class), and what the build measured comes out of Rates.
func TestETAModeledCosts(t *testing.T) {
	c := newETAClock(t)
	c.eta.Model(2, nil)
	plan := func(stage, id string, cost time.Duration) {
		c.eta.Emit(engine.Event{Event: engine.EventPlan, Node: id, Stage: stage, Time: c.start, CostNS: int64(cost)})
	}
	plan("tokenize", "tokenize", 100*time.Millisecond)
	plan("calibrate", "calibrate[0,1)", 200*time.Second)
	plan("calibrate", "calibrate[1,2)", 100*time.Second) // a shorter window than the first
	plan("finalize", "finalize:blk.0.ffn_down.weight", 80*time.Second)
	c.left(0, 0.05+100+50+40, false)
	c.ev(engine.EventNodeStarted, "tokenize", "tokenize", 0)
	c.ev(engine.EventNodeFinished, "tokenize", "tokenize", 1) // 20 times the model: small nodes only
	c.left(1, 100+50+40, false)
	c.ev(engine.EventNodeStarted, "calibrate", "calibrate[0,1)", 1)
	c.ev(engine.EventNodeFinished, "calibrate", "calibrate[0,1)", 151) // 0.75 s a modeled second
	// calibrate[1,2) by its class, scaled to its modeled cost (150 x 100/200 s; the class's mean would
	// say 150 s); ffn_down at the large nodes' rate, 0.75 x 80 s.
	c.left(151, 75+60, false)
	got := c.eta.Rates(c.at(151))
	at := c.at(151)
	want := []StageRate{
		{Stage: AnyStage, Share: time.Second, Cost: 100 * time.Millisecond, Measured: at},
		{Stage: AnyStage, Large: true, Share: 150 * time.Second, Cost: 200 * time.Second, Measured: at},
		{Stage: "calibrate", Large: true, Share: 150 * time.Second, Cost: 200 * time.Second, Measured: at},
		{Stage: "tokenize", Share: time.Second, Cost: 100 * time.Millisecond, Measured: at},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Rates = %+v\nwant %+v", got, want)
	}
}
