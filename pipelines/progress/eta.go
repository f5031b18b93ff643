package progress

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"orkpipe/pipelines/engine"
)

// ETA estimates how much longer a build runs, from its own events: what the build has measured so
// far, primed with what earlier builds of the target measured, and, for the nodes of kinds neither
// has timed, the graph's model of their costs (the plan events' CostNS) at the rates this host's
// builds measured. A windowed GPTQ build of a 27B model runs the same few node kinds block after
// block for hours, so once the first block's nodes have run, the rest is known to within the blocks'
// differences.
//
// A node's cost is its share of the wall time: while n nodes run, each is charged 1/n of every
// second, so that the shares of all nodes add up to the time nodes were running, whether they ran
// alone on every core (a calibrate window) or several at once (a block's finalize nodes). Each node
// not yet done is expected to cost the mean share of the finished nodes of its class — its id with
// every run of digits written '#' (finalize:blk.#.ffn_down.weight, calibrate[#,#)) — else of its
// stage; a running node the rest of that. The time left is the sum of those shares: the future is
// assumed to run its nodes as concurrently as the past ran the same kinds (on a 2-core host the
// calibrate windows one at a time, each on both cores; on 64 cores a block's finalize nodes side by
// side). Cached nodes cost nothing; a failed node's dependents (plan events' deps) never run.
//
// An earlier build's measurements (Prime, from the Costs it kept) fill in the kinds this build has
// not timed yet: a kind's own measurement first (scaled by the nodes' modeled costs when they differ
// within the kind), then the earlier build's for the kind, then the node's modeled cost (for a node
// with one), then this build's stage mean, then the earlier build's. What the earlier build measured is scaled by how long this build's finished nodes took against the
// earlier build's means for their kinds (the host, its load and --jobs may differ; scaleSteady damps
// the first seconds), so that a build says how long it will take from its start, not once a node of
// each kind has run. A node with none of them counts as zero, and the estimate is then a lower bound.
//
// A modeled cost is CPU time of one core of the host that planned the graph (engine.Node.Cost;
// pipelines/build's model at the host's measured speeds). Its share is
// the cost times a rate (StageRate), the first there is of: this build's for the node's stage and
// size class, the earlier builds' in the cache for them (Model), this build's over every stage, the
// earlier builds' over every stage; with none, the cost over the cores (Model; GOMAXPROCS by
// default): every core busy at the speed the cost model says.
//
// ETA is an engine.Sink; it is safe for concurrent use.
type ETA struct {
	mu      sync.Mutex
	nodes   map[string]*etaNode // planned and not done: not finished, failed or cached
	deps    map[string][]string // every planned node's dependencies
	classes map[string]*cost
	stages  map[string]*cost
	running map[string]*run // every running node (planned or not)
	last    time.Time       // when the running nodes' shares were last charged

	prior       map[string]*cost // an earlier build's means (Prime), by class and by stage
	priorStages map[string]*cost
	// scaleNow and scaleThen sum this build's finished nodes' shares and their classes' prior means,
	// over the finished nodes whose class has a prior: the prior's scale is
	// (scaleNow + scaleSteady) / (scaleThen + scaleSteady).
	scaleNow, scaleThen time.Duration

	cores      int                    // a modeled cost's share with no rate is cost/cores
	rates      map[rateKey]*StageRate // this build's, over its finished nodes with a cost
	priorRates map[rateKey]StageRate  // the earlier builds' in the cache (Model)
}

// scaleSteady is the time of earlier costs taken at their face value in the scale of the primed
// costs, so that a build's first few short nodes (a tokenize of 15 ms against 23 ms) do not rescale
// hours of estimate; a calibrate window of minutes outweighs it.
const scaleSteady = 10 * time.Second

type etaNode struct {
	stage, kind string
	class       string        // stage + " " + kind
	cost        time.Duration // modeled (the plan event's CostNS); 0: none
}

// newETANode is the node of e: its stage, its kind (nodeClass of its id), its class (both) and its
// modeled cost.
func newETANode(e engine.Event) *etaNode {
	k := nodeClass(e.Node)
	return &etaNode{stage: e.Stage, kind: k, class: e.Stage + " " + k, cost: time.Duration(max(0, e.CostNS))}
}

// run is a running node: its share of the wall time so far (up to ETA.last).
type run struct {
	share time.Duration
}

// cost sums the wall-time shares of the finished nodes of a class or stage, and their modeled costs.
type cost struct {
	stage, kind string // a class's
	share       time.Duration
	n           int
	modeled     time.Duration // the nodes' modeled costs
	unmodeled   int           // nodes without one
}

func (c *cost) add(share, modeled time.Duration) {
	c.share += share
	c.n++
	c.modeled += modeled
	if modeled <= 0 {
		c.unmodeled++
	}
}

func (c *cost) mean() time.Duration { return c.share / time.Duration(c.n) }

// of is the share c says node n costs: the class's mean, scaled by n's modeled cost against the
// class's when n and every node of c have one (calibrate windows of other sizes, one class).
func (c *cost) of(n *etaNode) time.Duration {
	if n.cost > 0 && c.unmodeled == 0 && c.modeled > 0 {
		return time.Duration(float64(c.share) * float64(n.cost) / float64(c.modeled))
	}
	return c.mean()
}

// NewETA returns an estimator that has seen no event.
func NewETA() *ETA {
	return &ETA{nodes: map[string]*etaNode{}, deps: map[string][]string{}, classes: map[string]*cost{},
		stages: map[string]*cost{}, running: map[string]*run{}, prior: map[string]*cost{}, priorStages: map[string]*cost{},
		cores: runtime.GOMAXPROCS(0), rates: map[rateKey]*StageRate{}, priorRates: map[rateKey]StageRate{}}
}

// Model gives the ETA the rates the builds in the cache kept (ReadRates) and the host's cores, for the nodes of kinds no build has
// timed (ETA's doc). Call it before the first event; cores < 1 counts as 1.
func (t *ETA) Model(cores int, rates []StageRate) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cores = max(1, cores)
	t.priorRates = map[rateKey]StageRate{}
	for _, r := range rates {
		if r.Cost > 0 && r.Share >= 0 {
			t.priorRates[rateKey{r.Stage, r.Large}] = r
		}
	}
}

// Rates returns what the build has measured of the modeled costs: a StageRate per stage and size
// class with a finished node that had a cost, and the same over every stage (AnyStage), stamped
// measured.
func (t *ETA) Rates(measured time.Time) []StageRate {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]StageRate, 0, len(t.rates))
	for _, r := range t.rates {
		out = append(out, StageRate{Stage: r.Stage, Large: r.Large, Share: r.Share, Cost: r.Cost, Measured: measured.UTC()})
	}
	sortRates(out)
	return out
}

// modeled is the share n's modeled cost says (ETA's doc), and whether it is at a rate a build
// measured.
func (t *ETA) modeled(n *etaNode) (share time.Duration, rated bool) {
	large := n.cost >= LargeCost
	for _, k := range []rateKey{{n.stage, large}, {AnyStage, large}} {
		if r := t.rates[k]; r != nil {
			return time.Duration(float64(n.cost) * r.rate()), true
		}
		if r, ok := t.priorRates[k]; ok {
			return time.Duration(float64(n.cost) * r.rate()), true
		}
	}
	return n.cost / time.Duration(t.cores), false
}

// addRate adds a finished node's share to the rates of its stage and of every stage.
func (t *ETA) addRate(n *etaNode, share time.Duration) {
	if n.cost <= 0 {
		return
	}
	large := n.cost >= LargeCost
	for _, k := range []rateKey{{n.stage, large}, {AnyStage, large}} {
		r := t.rates[k]
		if r == nil {
			r = &StageRate{Stage: k.stage, Large: large}
			t.rates[k] = r
		}
		r.Share += share
		r.Cost += n.cost
	}
}

// nodeClass is id with every run of decimal digits replaced by one '#'.
func nodeClass(id string) string {
	var b strings.Builder
	digits := false
	for _, r := range id {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

// charge gives each running node its share of the time from t.last to now.
func (t *ETA) charge(now time.Time) {
	if n := len(t.running); n > 0 && now.After(t.last) {
		d := now.Sub(t.last) / time.Duration(n)
		for _, r := range t.running {
			r.share += d
		}
	}
	if now.After(t.last) {
		t.last = now
	}
}

// Emit records e.
func (t *ETA) Emit(e engine.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Event {
	case engine.EventPlan:
		t.nodes[e.Node] = newETANode(e)
		t.deps[e.Node] = e.Deps
	case engine.EventNodeCached:
		delete(t.nodes, e.Node)
	case engine.EventNodeStarted:
		t.charge(e.Time)
		t.running[e.Node] = &run{}
	case engine.EventNodeFinished, engine.EventNodeFailed:
		t.charge(e.Time)
		r := t.running[e.Node]
		delete(t.running, e.Node)
		n := t.nodes[e.Node]
		delete(t.nodes, e.Node)
		if e.Event == engine.EventNodeFailed {
			t.dropDependents(e.Node)
			return
		}
		if r == nil { // no start seen: charge it as if it had run alone
			r = &run{share: time.Duration(e.DurationMS) * time.Millisecond}
		}
		if n == nil {
			n = newETANode(e)
		}
		c := t.cost(t.classes, n.class)
		c.stage, c.kind = n.stage, n.kind
		c.add(r.share, n.cost)
		t.cost(t.stages, n.stage).add(r.share, n.cost)
		t.addRate(n, r.share)
		if p := t.prior[n.class]; p != nil {
			t.scaleNow += r.share
			t.scaleThen += p.mean()
		}
	}
}

func (t *ETA) cost(m map[string]*cost, k string) *cost {
	if m[k] == nil {
		m[k] = &cost{}
	}
	return m[k]
}

// dropDependents removes every remaining node that depends, directly or not, on failed: the engine
// never runs it.
func (t *ETA) dropDependents(failed string) {
	gone := map[string]bool{failed: true}
	for changed := true; changed; {
		changed = false
		for id := range t.nodes {
			for _, d := range t.deps[id] {
				if gone[d] {
					gone[id], changed = true, true
					delete(t.nodes, id)
					break
				}
			}
		}
	}
}

// Left returns the estimated time from now to the build's end. ok is false while nothing can be said:
// no node has finished yet, no earlier build's costs were primed and no node left has a modeled
// cost, or none is left. lower reports that some remaining node has neither a measured, a primed nor
// a modeled cost (it counts as zero): the build takes at least left.
func (t *ETA) Left(now time.Time) (left time.Duration, lower, ok bool) {
	e := t.estimate(now, false)
	return e.Left, e.Lower, e.OK
}

// Estimated is an estimate of a build's time left, and what it rests on.
type Estimated struct {
	Left  time.Duration
	Lower bool // some node counted as zero: the build takes at least Left
	OK    bool // something could be said (Left's doc)
	// Kept counts the nodes estimated by the costs an earlier build of the target kept, Modeled those
	// estimated by their modeled cost, Rated those of Modeled at a rate a build measured (this one, or
	// one in the cache; the others over the cores, at the speed the cost model says).
	Kept, Modeled, Rated int
	// Stages is Left by the nodes' stages.
	Stages map[string]time.Duration
}

// Estimate is Left with what the estimate rests on, and its time by stage.
func (t *ETA) Estimate(now time.Time) Estimated { return t.estimate(now, true) }

// estimate is Estimate; byStage false leaves Stages nil (the sinks ask at every event and tick).
func (t *ETA) estimate(now time.Time, byStage bool) Estimated {
	t.mu.Lock()
	defer t.mu.Unlock()
	var e Estimated
	if len(t.nodes) == 0 {
		return e
	}
	var since time.Duration // the running nodes' shares from t.last to now
	if n := len(t.running); n > 0 && now.After(t.last) {
		since = now.Sub(t.last) / time.Duration(n)
	}
	scale := float64(t.scaleNow+scaleSteady) / float64(t.scaleThen+scaleSteady)
	for id, n := range t.nodes {
		var share time.Duration
		switch {
		case t.classes[n.class] != nil:
			share = t.classes[n.class].of(n)
		case t.prior[n.class] != nil:
			share = time.Duration(float64(t.prior[n.class].mean()) * scale)
			e.Kept++
		case n.cost > 0:
			var rated bool
			share, rated = t.modeled(n)
			e.Modeled++
			if rated {
				e.Rated++
			}
		case t.stages[n.stage] != nil:
			share = t.stages[n.stage].mean()
		case t.priorStages[n.stage] != nil:
			share = time.Duration(float64(t.priorStages[n.stage].mean()) * scale)
			e.Kept++
		default:
			e.Lower = true
			continue
		}
		if r := t.running[id]; r != nil {
			share = max(0, share-r.share-since)
		}
		e.Left += share
		if byStage {
			if e.Stages == nil {
				e.Stages = map[string]time.Duration{}
			}
			e.Stages[n.stage] += share
		}
	}
	if len(t.stages) == 0 && len(t.prior) == 0 && e.Modeled == 0 {
		return Estimated{}
	}
	e.OK = true
	return e
}

// shown is Left, with ok false also for a lower bound under a second (only untimed nodes are left):
// what the sinks show.
func (t *ETA) shown(now time.Time) (left time.Duration, lower, ok bool) {
	left, lower, ok = t.Left(now)
	return left, lower, ok && !(lower && left < time.Second)
}

// String is the estimate at now for a person: "~3h12m left", "under a second left", ">= 40s left" (a
// lower bound), or "" when there is none (nor when it is a lower bound under a second: only untimed
// nodes are left).
func (t *ETA) String(now time.Time) string {
	left, lower, ok := t.shown(now)
	if !ok {
		return ""
	}
	if lower {
		return ">= " + RoundLeft(left) + " left"
	}
	return About(left) + " left"
}

// appendJSON appends the estimate at now to a JSON object's fields, `,"left_ms":N` and, for a lower
// bound, `,"left_lower":true`; nothing when there is none.
func (t *ETA) appendJSON(b []byte, now time.Time) []byte {
	left, lower, ok := t.shown(now)
	if !ok {
		return b
	}
	b = strconv.AppendInt(append(b, `,"left_ms":`...), left.Milliseconds(), 10)
	if lower {
		b = append(b, `,"left_lower":true`...)
	}
	return b
}

// About renders an estimate d for a person: "~" and RoundLeft's rendering, or "under a second".
func About(d time.Duration) string {
	if d < time.Second {
		return "under a second"
	}
	return "~" + RoundLeft(d)
}

// RoundLeft renders d for a person: to the second under ten minutes, else to the minute ("3h12m"),
// deciding after rounding (9m59.6s is "10m", 59m40s "1h00m").
func RoundLeft(d time.Duration) string {
	if s := d.Round(time.Second); s < 10*time.Minute {
		return s.String()
	}
	m := int(d.Round(time.Minute).Minutes())
	if m < 60 {
		return fmt.Sprintf("%dm", m)
	}
	return fmt.Sprintf("%dh%02dm", m/60, m%60)
}
