package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"orkpipe/artifacts"
	"orkpipe/internal/buildinfo"
	"orkpipe/internal/hugebuf"
	"orkpipe/stages"
)

// Outcome is what happened to a node in a build.
type Outcome int

const (
	OutcomeSkipped  Outcome = iota // not run: a dependency failed, or the build stopped
	OutcomeCached                  // served from the action cache (or by a node with the same key)
	OutcomeExecuted                // its stage ran in this build
	OutcomeFailed                  // its stage, or storing its outputs, failed
	outcomeRetry                   // an input object was found corrupt (quarantined): rebuild its producer
)

func (o Outcome) String() string {
	switch o {
	case OutcomeCached:
		return "cached"
	case OutcomeExecuted:
		return "executed"
	case OutcomeFailed:
		return "failed"
	case outcomeRetry:
		return "retry"
	default:
		return "skipped"
	}
}

// nstate is a node's state in one pass; fields are written by the node's goroutine before done
// is closed and read by others after.
type nstate struct {
	done     chan struct{}
	outcome  Outcome
	key      artifacts.Digest
	material *stages.KeyMaterial
	outputs  map[string]stages.File
	sameAs   string
	err      error
	checked  bool  // run again by BuildOptions.Check, and it reproduced its record
	mismatch error // run again by BuildOptions.Check, and it did not (ErrNotReproducible)
}

// flight is the result of the single execution of one key within a pass: the node that ran it and
// its outcome; for a node run again by BuildOptions.Check, whether it reproduced its record
// (checked) or how it did not (mismatch; its outputs are then still the record's).
type flight struct {
	owner    string
	outcome  Outcome
	outputs  map[string]stages.File
	err      error
	checked  bool
	mismatch error
}

// pass runs every node of a plan once, each in its own goroutine waiting for its dependencies.
type pass struct {
	e       *Engine
	p       *Plan
	ctx     context.Context // canceled on the first failure unless keep-going
	cancel  context.CancelFunc
	states  []*nstate
	check   func(stage string) bool // BuildOptions.Check; nil: none
	sources *sourceHasher
	emit    func(Event)
	jobs    *slots
	ranks   []rank // by node index: the order of waiting for a job slot
	mem     *semaphore.Weighted
	memUse  *atomic.Int64
	memPeak *atomic.Int64

	flights  onceGroup[artifacts.Digest, flight]   // one run per key
	verified onceGroup[artifacts.Digest, struct{}] // one Store.Verify per object
}

func (e *Engine) runPass(ctx context.Context, p *Plan, emit func(Event), check func(string) bool, memUse, memPeak *atomic.Int64) *pass {
	ctx, cancel := context.WithCancel(ctx)
	ps := &pass{
		e: e, p: p, ctx: ctx, cancel: cancel,
		states:  make([]*nstate, len(p.nodes)),
		check:   check,
		sources: newSourceHasher(e.store),
		emit:    emit,
		jobs:    newSlots(e.cfg.jobs),
		ranks:   make([]rank, len(p.nodes)),
		mem:     semaphore.NewWeighted(e.cfg.mem),
		memUse:  memUse, memPeak: memPeak,
	}
	for i := range ps.states {
		ps.states[i] = &nstate{done: make(chan struct{})}
	}
	tail := tails(p.nodes)
	for i, l := range levels(p.nodes) {
		ps.ranks[i] = rank{tail: tail[i], level: l, mem: p.nodes[i].spec.PeakMemory, index: i}
	}
	var wg sync.WaitGroup
	for i := range p.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ps.states[i].done)
			// CPU profiles (--cpuprofile) attribute a node's work, and that of the goroutines
			// it starts, to its node and stage: go tool pprof -tagfocus stage=...
			n := p.nodes[i].node
			pprof.Do(ps.ctx, pprof.Labels("node", n.id, "stage", n.stage), func(context.Context) { ps.runNode(i) })
		}()
	}
	wg.Wait()
	cancel()
	return ps
}

func (ps *pass) runNode(i int) {
	pn, st := ps.p.nodes[i], ps.states[i]
	for _, d := range pn.deps {
		select {
		case <-ps.states[d].done:
		case <-ps.ctx.Done():
			st.err = ps.ctx.Err()
			return
		}
		if ds := ps.states[d]; ds.outcome != OutcomeCached && ds.outcome != OutcomeExecuted {
			st.err = fmt.Errorf("%w: dependency %q %s", ErrSkipped, ps.p.nodes[d].node.id, ds.outcome)
			return
		}
	}
	if err := ps.ctx.Err(); err != nil {
		st.err = err
		return
	}
	outputs := func(d int) map[string]stages.File { return ps.states[d].outputs }
	m, inputs, tools, err := ps.e.material(ps.ctx, pn, outputs, ps.sources)
	if err != nil {
		ps.fail(st, pn, err)
		return
	}
	key, err := m.Key()
	if err != nil {
		ps.fail(st, pn, err)
		return
	}
	st.key, st.material = key, &m

	f, ran, err := ps.flights.do(ps.ctx, key, func() (flight, error) {
		fl := ps.resolve(pn, key, m, inputs, tools)
		fl.owner = pn.node.id
		return fl, nil
	})
	if err != nil { // gave up waiting for the node running the same key
		st.err = err
		return
	}
	if !ran {
		st.sameAs = f.owner
		switch f.outcome {
		case OutcomeCached, OutcomeExecuted:
			st.outcome, st.outputs = OutcomeCached, f.outputs
			ps.emit(Event{Event: EventNodeCached, Node: pn.node.id, Key: key.String(), Stage: pn.node.stage, SameAs: f.owner, Outputs: digests(f.outputs)})
		default:
			st.err = fmt.Errorf("%w: node %q with the same key %s %s", ErrSkipped, f.owner, key, f.outcome)
		}
		return
	}
	st.outcome, st.outputs, st.err, st.checked, st.mismatch = f.outcome, f.outputs, f.err, f.checked, f.mismatch
	if st.outcome == OutcomeFailed && !ps.e.cfg.keepGoing {
		ps.cancel()
	}
}

func (ps *pass) fail(st *nstate, pn *pnode, err error) {
	if ps.ctx.Err() != nil {
		st.err = ps.ctx.Err()
		return
	}
	st.outcome = OutcomeFailed
	st.err = fmt.Errorf("%w: node %q (stage %q): %w", ErrNodeFailed, pn.node.id, pn.node.stage, err)
	ps.emit(Event{Event: EventNodeFailed, Node: pn.node.id, Stage: pn.node.stage, Error: err.Error()})
	if !ps.e.cfg.keepGoing {
		ps.cancel()
	}
}

// resolve serves key from the action cache or runs the node: take a job slot and the node's
// memory, lock the key across processes, look again (another process may have built it), verify
// the input objects, execute, check the sources did not change, store the action record. A node
// the cache serves whose stage ps.check accepts runs too (without the key lock: it stores no
// record), and its outputs are compared with the record's (ps.compare): checked reports a
// reproduced record, mismatch one that was not, and the outputs returned are the record's.
func (ps *pass) resolve(pn *pnode, key artifacts.Digest, m stages.KeyMaterial, inputs, tools map[string]stages.File) flight {
	ctx, id := ps.ctx, pn.node.id
	checking := ps.check != nil && ps.check(pn.node.stage)
	recorded, hit := ps.lookup(pn, key)
	if hit && !checking {
		ps.emitCached(pn, key, recorded)
		return flight{outcome: OutcomeCached, outputs: recorded}
	}
	if err := ps.jobs.acquire(ctx, ps.ranks[pn.node.index]); err != nil {
		return flight{outcome: OutcomeSkipped, err: err}
	}
	defer ps.jobs.release()
	need := pn.spec.PeakMemory
	if err := ps.mem.Acquire(ctx, need); err != nil {
		return flight{outcome: OutcomeSkipped, err: err}
	}
	use := ps.memUse.Add(need)
	for peak := ps.memPeak.Load(); use > peak && !ps.memPeak.CompareAndSwap(peak, use); peak = ps.memPeak.Load() {
	}
	defer func() { ps.memUse.Add(-need); ps.mem.Release(need) }()
	// The garbage of nodes that finished still counts against the process's memory limit until the
	// collector runs, which it does only after an allocation passes its goal: collect first when
	// this node's memory would not fit beside it.
	hugebuf.MakeRoom(need)

	if !hit {
		unlock, err := ps.e.store.LockKey(ctx, key)
		if err != nil {
			if ctx.Err() != nil {
				return flight{outcome: OutcomeSkipped, err: ctx.Err()}
			}
			return ps.failed(pn, key, time.Now(), fmt.Errorf("locking key: %w", err))
		}
		defer func() {
			if err := unlock(); err != nil {
				ps.e.cfg.logger.Warn("unlocking node key", "node", id, "key", key, "err", err)
			}
		}()
		if recorded, hit = ps.lookup(pn, key); hit && !checking {
			ps.emitCached(pn, key, recorded)
			return flight{outcome: OutcomeCached, outputs: recorded}
		}
	}
	switch {
	case !hit:
		recorded = nil
	case recorded == nil: // a record of no outputs: still a record to check against
		recorded = map[string]stages.File{}
	}
	return ps.execute(pn, key, m, inputs, tools, recorded)
}

// execute verifies the node's input objects and runs its stage. Without a record (record is nil)
// it stores the action record and returns the new outputs; with one (a check) it stores nothing
// and compares the outputs with the record's.
func (ps *pass) execute(pn *pnode, key artifacts.Digest, m stages.KeyMaterial, inputs, tools, record map[string]stages.File) flight {
	ctx, id := ps.ctx, pn.node.id
	verified := ps.noticeVerify(pn, key, inputs)
	defer verified() // before node_started below, and on every early return
	for name, in := range pn.node.inputs {
		if in.node == nil {
			continue
		}
		f := inputs[name]
		path, err := ps.e.store.Path(ctx, f.Digest)
		if err == nil {
			f.Path = path
			inputs[name] = f
			err = ps.verify(ctx, f.Digest)
		}
		if err != nil {
			if errors.Is(err, artifacts.ErrNotFound) {
				ps.e.cfg.logger.Warn("input object missing; its producer will run again", "node", id, "input", name, "producer", in.node.id, "err", err)
				return flight{outcome: outcomeRetry, err: err}
			}
			if isCorrupt(err) {
				ps.e.cfg.logger.Warn("input object corrupt; quarantined, its producer will run again", "node", id, "input", name, "producer", in.node.id, "err", err)
				return flight{outcome: outcomeRetry, err: err}
			}
			if ctx.Err() != nil {
				return flight{outcome: OutcomeSkipped, err: ctx.Err()}
			}
			return ps.failed(pn, key, time.Now(), fmt.Errorf("input %q: %w", name, err))
		}
	}
	verified()
	start := time.Now()
	ps.emit(Event{Event: EventNodeStarted, Node: id, Key: key.String(), Stage: pn.node.stage, Time: start, Checked: record != nil})
	req := ExecRequest{Key: key, Material: m, Inputs: inputs, Tools: tools}
	var outs []artifacts.NamedObject
	var ran *artifacts.Provenance
	var err error
	if px, ok := ps.e.cfg.executor.(ProvenanceExecutor); ok {
		var p artifacts.Provenance
		outs, p, err = px.ExecuteProvenance(ctx, req)
		ran = &p
	} else {
		outs, err = ps.e.cfg.executor.Execute(ctx, req)
	}
	if err == nil {
		err = ps.checkSources(pn, inputs)
	}
	if err != nil {
		return ps.failed(pn, key, start, err)
	}
	if record != nil {
		mismatch := ps.compare(pn, key, start, outs, record)
		return flight{outcome: OutcomeExecuted, outputs: record, checked: mismatch == nil, mismatch: mismatch}
	}
	rec := artifacts.ActionRecord{Key: key, Stage: m.Stage, Version: m.Version, Outputs: outs}
	if err := fillProvenance(&rec.Provenance, start, m.Tools); err != nil {
		return ps.failed(pn, key, start, err)
	}
	if ran != nil && ran.Host != "" { // the node ran elsewhere: record that host and binary, not ours
		rec.Provenance.Host, rec.Provenance.Orkpipe = ran.Host, ran.Orkpipe
		rec.Provenance.Start, rec.Provenance.End = ran.Start, ran.End
	}
	if err := ps.e.store.PutAction(ctx, rec); err != nil {
		return ps.failed(pn, key, start, fmt.Errorf("storing the action record: %w", err))
	}
	files, err := ps.e.recordFiles(pn, rec)
	if err != nil {
		return ps.failed(pn, key, start, err)
	}
	ps.emit(Event{Event: EventNodeFinished, Node: id, Key: key.String(), Stage: pn.node.stage, Time: time.Now(), DurationMS: time.Since(start).Milliseconds(), Outputs: digests(files)})
	return flight{outcome: OutcomeExecuted, outputs: files}
}

// compare checks a checked node's new outputs against its record and reports the result as an
// event: node_finished (checked) when every output has the recorded name, digest and size,
// node_failed otherwise; the returned error (ErrNotReproducible) names every difference.
func (ps *pass) compare(pn *pnode, key artifacts.Digest, start time.Time, outs []artifacts.NamedObject, record map[string]stages.File) error {
	got := make(map[string]artifacts.Object, len(outs))
	for _, o := range outs {
		got[o.Name] = artifacts.Object{Digest: o.Digest, Size: o.Size}
	}
	var diffs []string
	for _, name := range slices.Sorted(maps.Keys(record)) {
		want := record[name]
		o, ok := got[name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("output %q recorded as %s (%d bytes), not made by this run", name, want.Digest, want.Size))
		case o.Digest != want.Digest || o.Size != want.Size:
			diffs = append(diffs, fmt.Sprintf("output %q recorded as %s (%d bytes), this run made %s (%d bytes)", name, want.Digest, want.Size, o.Digest, o.Size))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := record[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("output %q made by this run (%s), not in the record", name, got[name].Digest))
		}
	}
	id := pn.node.id
	if len(diffs) == 0 {
		ps.emit(Event{Event: EventNodeFinished, Node: id, Key: key.String(), Stage: pn.node.stage, Time: time.Now(), DurationMS: time.Since(start).Milliseconds(), Outputs: digests(record), Checked: true})
		return nil
	}
	msg := strings.Join(diffs, "; ")
	ps.emit(Event{Event: EventNodeFailed, Node: id, Key: key.String(), Stage: pn.node.stage, Time: time.Now(), DurationMS: time.Since(start).Milliseconds(), Error: ErrNotReproducible.Error() + ": " + msg})
	return fmt.Errorf("node %q (stage %q, key %s): %w: %s (bump the stage's version if its output changed on purpose, else it is not deterministic)", id, pn.node.stage, key, ErrNotReproducible, msg)
}

// failed reports a node's failure; once the build is being canceled, any failure is reported as
// the cancellation (the node counts as skipped).
func (ps *pass) failed(pn *pnode, key artifacts.Digest, start time.Time, err error) flight {
	if cerr := ps.ctx.Err(); cerr != nil {
		ps.emit(Event{Event: EventNodeFailed, Node: pn.node.id, Key: key.String(), Stage: pn.node.stage, Time: time.Now(), DurationMS: time.Since(start).Milliseconds(), Error: "canceled"})
		return flight{outcome: OutcomeSkipped, err: cerr}
	}
	ps.emit(Event{Event: EventNodeFailed, Node: pn.node.id, Key: key.String(), Stage: pn.node.stage, Time: time.Now(), DurationMS: time.Since(start).Milliseconds(), Error: err.Error()})
	return flight{outcome: OutcomeFailed, err: fmt.Errorf("%w: node %q (stage %q, key %s): %w", ErrNodeFailed, pn.node.id, pn.node.stage, key, err)}
}

// emitCached reports a node served from the action cache.
func (ps *pass) emitCached(pn *pnode, key artifacts.Digest, files map[string]stages.File) {
	ps.emit(Event{Event: EventNodeCached, Node: pn.node.id, Key: key.String(), Stage: pn.node.stage, Time: time.Now(), Outputs: digests(files)})
}

// lookup returns the outputs of key's action record if it exists and its objects are present.
func (ps *pass) lookup(pn *pnode, key artifacts.Digest) (map[string]stages.File, bool) {
	rec, err := ps.e.store.GetAction(ps.ctx, key)
	if err != nil {
		if !errors.Is(err, artifacts.ErrNotFound) {
			ps.e.warnUnusable(pn.node.id, key, err)
		}
		return nil, false
	}
	files, err := ps.e.recordFiles(pn, rec)
	if err != nil {
		ps.e.cfg.logger.Warn("action record outputs unusable; running the node", "node", pn.node.id, "key", key, "err", err)
		return nil, false
	}
	return files, true
}

// noticeVerify arranges for node_verifying to be emitted for pn if verifying its input objects
// (from other nodes; re-hashing those an earlier process stored, at 27B many GiB) takes longer than
// the engine's verify notice, so that a watcher is not left without an event while it lasts. The
// function it returns ends the wait: once it has returned, no node_verifying of this call follows.
func (ps *pass) noticeVerify(pn *pnode, key artifacts.Digest, inputs map[string]stages.File) func() {
	ev := Event{Event: EventNodeVerifying, Node: pn.node.id, Key: key.String(), Stage: pn.node.stage}
	for name, in := range pn.node.inputs {
		if in.node != nil {
			ev.Bytes += inputs[name].Size
		}
	}
	if ev.Bytes == 0 {
		return func() {}
	}
	if ps.e.cfg.verifyNotice == 0 {
		ev.Time = time.Now()
		ps.emit(ev)
		return func() {}
	}
	var mu sync.Mutex
	done := false
	t := time.AfterFunc(ps.e.cfg.verifyNotice, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			ev.Time = time.Now()
			ps.emit(ev)
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		done = true
		mu.Unlock()
	}
}

// verify re-hashes a stored object once per pass before a stage reads it.
func (ps *pass) verify(ctx context.Context, d artifacts.Digest) error {
	_, _, err := ps.verified.do(ctx, d, func() (struct{}, error) { return struct{}{}, ps.e.store.Verify(ctx, d) })
	return err
}

// checkSources re-checks, after a run, that every source file still has the digest the key was
// computed from (the stat cache makes this a stat when nothing changed).
func (ps *pass) checkSources(pn *pnode, inputs map[string]stages.File) error {
	for name, in := range pn.node.inputs {
		if in.node != nil {
			continue
		}
		obj, err := ps.e.store.HashFile(ps.ctx, in.path)
		if err != nil {
			return fmt.Errorf("re-checking source %s (input %q): %w", in.path, name, err)
		}
		if obj.Digest != inputs[name].Digest {
			return fmt.Errorf("%w: %s (input %q) was %s when the node started, %s after", ErrSourceChanged, in.path, name, inputs[name].Digest, obj.Digest)
		}
	}
	return nil
}

var hostname = sync.OnceValue(func() string { h, _ := os.Hostname(); return h })

func fillProvenance(p *artifacts.Provenance, start time.Time, tools map[string]artifacts.Digest) error {
	info, err := buildinfo.Get()
	if err != nil {
		return fmt.Errorf("provenance: %w", err)
	}
	p.Host, p.Start, p.End = hostname(), start.UTC(), time.Now().UTC()
	p.Orkpipe.Version, p.Orkpipe.Revision, p.Orkpipe.Dirty, p.Orkpipe.Binary = info.Version, info.Revision, info.Dirty, info.Digest
	if len(tools) > 0 {
		p.Tools = tools
	}
	return nil
}

func digests(files map[string]stages.File) map[string]string {
	out := make(map[string]string, len(files))
	for n, f := range files {
		out[n] = f.Digest.String()
	}
	return out
}
