package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"orkpipe/artifacts"
)

// BuildOptions says where a build's exports go.
type BuildOptions struct {
	// OutDir receives each export as <OutDir>/<export name>, read-only (Store.Materialize). Empty:
	// nothing is materialized (the exports are still pinned).
	OutDir string
	// Force replaces files in OutDir that orkpipe did not write or that changed since.
	Force bool
	// Check, when set, runs again every node of a stage it accepts that the action cache would
	// serve, and compares the outputs with the record's (names, digests, sizes): the check that a
	// stage's output did not change under an unchanged key (DESIGN.md: stage versions). A node
	// that reproduces its record is reported executed and checked; one that does not is reported
	// failed with ErrNotReproducible, naming each output's recorded and new digest. Either way
	// the record and every stored object stay as they were, and the node's dependents run (or are
	// checked) on the recorded outputs, so one build reports every difference. Nodes not in the
	// cache run as in any build. A checking build is never served from the build memo.
	Check func(stage string) bool
	// Plan, when not zero, is the caller's digest of everything the graph was planned from besides
	// this executable, its numerics, the budget, the target name and the files the graph reads
	// (build.Target.PlanKey). Build records it in the build memo, so that MemoAhead.BuildUnplanned
	// given the same digest can serve the next build without the graph. The caller vouches that the
	// graph is a function of these and of its source files' contents; BuildFromMemo ignores it.
	Plan artifacts.Digest
	// BeforeDeliver, when set and OutDir is not empty, is called with the verified exports (by
	// export name) right before they are materialized, on every path that delivers them (a build
	// served from its memo too); an error stops the build there, with nothing materialized. It
	// is where the caller checks that OutDir has room for them.
	BeforeDeliver func(ctx context.Context, exports map[string]artifacts.Object) error
}

// NodeResult is the outcome of one node.
type NodeResult struct {
	ID      string
	Stage   string
	Key     artifacts.Digest // zero if the key was never computed
	Outcome Outcome
	SameAs  string // set when another node with identical key material produced the outputs
	Err     error
}

// Result describes a finished (or stopped) build.
type Result struct {
	Target                            string
	Executed, Cached, Failed, Skipped int // by node; they sum to the number of nodes
	Checked                           int // of Executed: cached nodes run again by BuildOptions.Check that reproduced their record
	Executions                        int // stage runs, over every pass
	Passes                            int // >1 when a corrupt object forced its producer to run again
	Duration                          time.Duration
	PeakMemory                        int64                       // highest sum of declared memory of nodes running at once
	Exports                           map[string]artifacts.Object // export name -> object
	Outputs                           map[string]string           // export name -> materialized path
	Replaced                          map[string]string           // export name -> what --force replaced
	Nodes                             []NodeResult
}

// Build runs the plan: every node is served from the action cache or executed, at most jobs at a
// time and within the memory budget; then the exports are verified, materialized into
// opts.OutDir and pinned under target, and the key materials are recorded for explain. A corrupt
// object found on the way is quarantined by the store and its producer runs again (in another
// pass, at most three). The returned error joins the failures of every failed node, each naming
// the node and its key; the Result is valid even when err is not nil.
func (e *Engine) Build(ctx context.Context, target string, p *Plan, opts BuildOptions) (*Result, error) {
	start := time.Now()
	res := &Result{Target: target, Exports: map[string]artifacts.Object{}, Outputs: map[string]string{}, Replaced: map[string]string{}}
	emit := e.dedupEmitter()
	for _, pn := range p.nodes {
		ev := Event{Event: EventPlan, Node: pn.node.id, Stage: pn.node.stage, Time: start, Mem: pn.spec.PeakMemory, Writes: pn.node.writes, CostNS: pn.node.cost}
		for _, d := range pn.deps {
			ev.Deps = append(ev.Deps, p.nodes[d].node.id)
		}
		emit(ev)
	}
	var memUse, memPeak atomic.Int64
	executed := make([]bool, len(p.nodes))
	var ps *pass
	var err error
	for res.Passes = 1; ; res.Passes++ {
		ps = e.runPass(ctx, p, emit, opts.Check, &memUse, &memPeak)
		retry := false
		for i, st := range ps.states {
			if st.outcome == OutcomeExecuted {
				executed[i] = true
				res.Executions++
			}
			retry = retry || st.outcome == outcomeRetry
		}
		err = ps.err(ctx)
		if retry && ctx.Err() == nil && !ps.anyFailed() {
			err = nil // nodes skipped behind a quarantined input run in the next pass
		} else if err == nil {
			var corrupt bool
			corrupt, err = e.finish(ctx, target, p, ps, opts, res)
			retry = corrupt
		}
		if err != nil || !retry {
			break
		}
		if res.Passes >= e.cfg.maxPasses {
			err = fmt.Errorf("corrupt objects still found after %d passes; run `orkpipe cache verify`", res.Passes)
			break
		}
		e.cfg.logger.Warn("corrupt objects were quarantined; building again", "target", target, "pass", res.Passes+1)
	}
	for i, st := range ps.states {
		pn := ps.p.nodes[i]
		nr := NodeResult{ID: pn.node.id, Stage: pn.node.stage, Key: st.key, Outcome: st.outcome, SameAs: st.sameAs, Err: st.err}
		if executed[i] && st.outcome == OutcomeCached {
			nr.Outcome = OutcomeExecuted
		}
		if st.checked {
			res.Checked++
		}
		if st.mismatch != nil {
			nr.Outcome, nr.Err = OutcomeFailed, st.mismatch
		}
		if nr.Outcome == outcomeRetry {
			nr.Outcome = OutcomeSkipped
		}
		switch nr.Outcome {
		case OutcomeExecuted:
			res.Executed++
		case OutcomeCached:
			res.Cached++
		case OutcomeFailed:
			res.Failed++
		default:
			res.Skipped++
		}
		res.Nodes = append(res.Nodes, nr)
	}
	res.PeakMemory = memPeak.Load()
	if herr := e.record(target, ps, res, start); herr != nil {
		e.cfg.logger.Warn("recording the build for explain", "target", target, "err", herr)
	}
	if err == nil && res.Failed == 0 && res.Skipped == 0 {
		if merr := e.writeMemo(ctx, target, ps, opts.Plan); merr != nil {
			e.cfg.logger.Warn("writing the build memo; the next build plans in full", "target", target, "err", merr)
		}
	}
	res.Duration = time.Since(start)
	e.summarize(emit, res, err)
	return res, err
}

// summarize emits the summary event of a build that ended with err.
func (e *Engine) summarize(emit func(Event), res *Result, err error) {
	sum := &Summary{Event: EventSummary, Target: res.Target, Executed: res.Executed, Checked: res.Checked, Cached: res.Cached, Failed: res.Failed,
		Skipped: res.Skipped, DurationMS: res.Duration.Milliseconds(), Outputs: map[string]string{}}
	for name, obj := range res.Exports {
		sum.Outputs[name] = obj.Digest.String()
	}
	for name, path := range res.Outputs {
		sum.Outputs[name] = path
	}
	if err != nil {
		sum.Error = err.Error()
	}
	emit(Event{Event: EventSummary, Time: time.Now(), Summary: sum})
}

func (ps *pass) anyFailed() bool {
	for _, st := range ps.states {
		if st.outcome == OutcomeFailed || st.mismatch != nil {
			return true
		}
	}
	return false
}

// err joins the errors of the failed nodes; a canceled parent context wins.
func (ps *pass) err(parent context.Context) error {
	if err := parent.Err(); err != nil {
		return fmt.Errorf("build stopped: %w", err)
	}
	var errs []error
	skipped := 0
	for _, st := range ps.states {
		if st.mismatch != nil {
			errs = append(errs, st.mismatch)
		}
		switch st.outcome {
		case OutcomeFailed:
			errs = append(errs, st.err)
		case OutcomeSkipped:
			skipped++
		}
	}
	if len(errs) > 0 {
		if skipped > 0 {
			errs = append(errs, fmt.Errorf("%w: %d nodes not run", ErrSkipped, skipped))
		}
		return errors.Join(errs...)
	}
	if skipped > 0 {
		return fmt.Errorf("%w: %d nodes not run", ErrSkipped, skipped)
	}
	return nil
}

// finish verifies, materializes and pins the exports. It reports corrupt=true (and no error) when
// an export failed verification and was quarantined, so that the caller builds again.
func (e *Engine) finish(ctx context.Context, target string, p *Plan, ps *pass, opts BuildOptions, res *Result) (corrupt bool, err error) {
	exports := make([]resolvedExport, len(p.exports))
	for i, x := range p.exports {
		f := ps.states[x.node].outputs[x.output]
		exports[i] = resolvedExport{name: x.name, node: p.nodes[x.node].node.id, obj: artifacts.Object{Digest: f.Digest, Size: f.Size}}
		if err := e.verifyExport(ctx, f.Digest); err != nil {
			if isCorrupt(err) {
				e.cfg.logger.Warn("export corrupt; quarantined, its producer will run again", "export", x.name, "node", exports[i].node, "err", err)
				return true, nil
			}
			return false, fmt.Errorf("verifying export %q (%s): %w", x.name, f.Digest, err)
		}
	}
	return false, e.deliver(ctx, target, exports, opts, res)
}

// resolvedExport is an export with the object it names.
type resolvedExport struct {
	name, node string
	obj        artifacts.Object
}

// deliver materializes verified exports into opts.OutDir and pins them under target.
func (e *Engine) deliver(ctx context.Context, target string, exports []resolvedExport, opts BuildOptions, res *Result) error {
	var pins []artifacts.Digest
	for _, x := range exports {
		res.Exports[x.name] = x.obj
		pins = append(pins, x.obj.Digest)
	}
	if opts.OutDir != "" {
		if opts.BeforeDeliver != nil {
			byName := make(map[string]artifacts.Object, len(exports))
			for _, x := range exports {
				byName[x.name] = x.obj
			}
			if err := opts.BeforeDeliver(ctx, byName); err != nil {
				return err
			}
		}
		for _, x := range exports {
			dst := filepath.Join(opts.OutDir, x.name)
			mr, err := e.store.Materialize(ctx, x.obj.Digest, dst, artifacts.MaterializeOptions{Force: opts.Force})
			if err != nil {
				return fmt.Errorf("materializing export %q to %s: %w", x.name, dst, err)
			}
			res.Outputs[x.name] = mr.Path
			if mr.Replaced != "" {
				res.Replaced[x.name] = mr.Replaced
			}
		}
	}
	if len(pins) > 0 {
		if err := e.store.Pin(ctx, target, pins); err != nil {
			return fmt.Errorf("pinning the exports of %q: %w", target, err)
		}
	}
	return nil
}

// verifyExport checks an export's object before it is materialized and pinned. The object is
// re-hashed (Store.Verify) unless the store's stat cache holds its digest for the object file's
// unchanged (device, inode, size, mtime, ctime) — the rule that already decides whether a source
// file is re-hashed. Objects are read-only and never rewritten; changing one (or a hard-linked
// output, which shares its inode) takes a chmod and a write, which move its ctime, so a no-op
// rebuild of a 12 GiB pack and a 28 GiB stub costs a few stats instead of 40 GiB of hashing. Any
// doubt (no entry, a changed file, a different digest) falls back to Store.Verify, which
// quarantines a corrupt object.
func (e *Engine) verifyExport(ctx context.Context, d artifacts.Digest) error {
	if path, err := e.store.Path(ctx, d); err == nil {
		if obj, err := e.store.HashFile(ctx, path); err == nil && obj.Digest == d {
			return nil
		}
	}
	return e.store.Verify(ctx, d)
}

// dedupEmitter forwards events to the sink, dropping a node event identical in kind and key to
// one already sent for that node (a later pass re-serves cached nodes).
func (e *Engine) dedupEmitter() func(Event) {
	var mu sync.Mutex
	sent := map[string]bool{}
	return func(ev Event) {
		if ev.Event != EventSummary {
			id := ev.Event + "\x00" + ev.Node + "\x00" + ev.Key
			mu.Lock()
			dup := sent[id]
			sent[id] = true
			mu.Unlock()
			if dup {
				return
			}
		}
		if ev.Time.IsZero() {
			ev.Time = time.Now()
		}
		e.cfg.sink.Emit(ev)
	}
}
