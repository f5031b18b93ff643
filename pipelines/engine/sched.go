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
// memory, take the key's cross-process lock (lockKey: a node waits for it holding neither), look
// again (another process may have built it), verify the input objects, execute, check the sources
// did not change, store the action record. A node the cache serves whose stage ps.check accepts
// runs too (without the key lock: it stores no record), and its outputs are compared with the
// record's (ps.compare): checked reports a reproduced record, mismatch one that was not, and the
// outputs returned are the record's.
func (ps *pass) resolve(pn *pnode, key artifacts.Digest, m stages.KeyMaterial, inputs, tools map[string]stages.File) flight {
	ctx := ps.ctx
	checking := ps.check != nil && ps.check(pn.node.stage)
	recorded, hit := ps.lookup(pn, key)
	if hit && !checking {
		ps.emitCached(pn, key, recorded)
		return flight{outcome: OutcomeCached, outputs: recorded}
	}
	release, err := ps.reserve(pn)
	if err != nil {
		return flight{outcome: OutcomeSkipped, err: err}
	}
	defer func() { release() }() // release is replaced below when lockKey gave it back
	if !hit {
		unlock, reserved, err := ps.lockKey(pn, key, release)
		if err != nil {
			if ctx.Err() != nil {
				return flight{outcome: OutcomeSkipped, err: ctx.Err()}
			}
			return ps.failed(pn, key, time.Now(), fmt.Errorf("locking key: %w", err))
		}
		defer unlock()
		if recorded, hit = ps.lookup(pn, key); hit && !checking {
			ps.emitCached(pn, key, recorded)
			return flight{outcome: OutcomeCached, outputs: recorded}
		}
		if !reserved { // it waited for another build, which did not record the key: run it here
			if release, err = ps.reserve(pn); err != nil {
				release = func() {}
				return flight{outcome: OutcomeSkipped, err: err}
			}
		}
	}
	switch {
	case !hit:
		recorded = nil
	case recorded == nil: // a record of no outputs: still a record to check against
		recorded = map[string]stages.File{}
	}
	// The garbage of nodes that finished still counts against the process's memory limit until the
	// collector runs, which it does only after an allocation passes its goal: collect first when
	// this node's memory would not fit beside it.
	hugebuf.MakeRoom(pn.spec.PeakMemory)
	return ps.execute(pn, key, m, inputs, tools, recorded)
}

// reserve takes a job slot (in pn's rank) and pn's declared memory from the budget (counted in
// memUse and memPeak while held), waiting for both, or returns ctx's error holding neither. The
// function it returns gives both back; calls after the first do nothing.
func (ps *pass) reserve(pn *pnode) (release func(), err error) {
	if err := ps.jobs.acquire(ps.ctx, ps.ranks[pn.node.index]); err != nil {
		return nil, err
	}
	need := pn.spec.PeakMemory
	if err := ps.mem.Acquire(ps.ctx, need); err != nil {
		ps.jobs.release()
		return nil, err
	}
	use := ps.memUse.Add(need)
	for peak := ps.memPeak.Load(); use > peak && !ps.memPeak.CompareAndSwap(peak, use); peak = ps.memPeak.Load() {
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			ps.memUse.Add(-need)
			ps.mem.Release(need)
			ps.jobs.release()
		})
	}, nil
}

// lockKey takes key's cross-process lock for pn, which holds a job slot and its memory (release
// gives them back). It first tries the lock without waiting; if another build holds it, lockKey
// gives the slot and the memory back before it waits (reserved false, also when it fails): the
// caller looks key up again and takes them again only if it must still run the node. While it
// waits, the wait is logged once it lasts (artifacts' lock patience, at -v), and ctx ends it.
//
// Lock order. A node holds at most three things: a job slot and memory of its pass, and its key's
// lock, shared with every other build of the store (other processes, other passes of this one).
// The rules: (1) a node never waits for a key lock while it holds a slot or memory: holding them it
// only tries the lock, which returns at once; (2) a slot is taken before memory (reserve); (3)
// holding a key lock a node may wait for a slot and memory (after waiting for the lock), and then
// only runs. Nothing waits in a cycle: a node waiting for a slot or memory waits for nodes of its
// own pass that hold them, and those either run (they wait for no lock: their inputs are done, and
// a shared input verification waits only for a hash), try a lock, or wait for memory held by
// running nodes, so slots and memory always come free whatever any key lock does; a node waiting
// for a key lock holds nothing of its pass, and the holder runs or waits only for slots and memory
// of its own build, which come free as above. (An older orkpipe that waits for a key holding its
// own slot stalls only its own build.) Waiting for the lock before taking a slot, always, would be
// deadlock-free too, but then every node queued for a slot would hold its key's lock and another
// process with free slots could not take any of those keys: two builds sharing a store would stop
// sharing the work.
func (ps *pass) lockKey(pn *pnode, key artifacts.Digest, release func()) (unlock func(), reserved bool, err error) {
	u, ok := tryLockKey(ps.e.store, key)
	if !ok {
		release()
		ps.e.cfg.logger.Debug("node waits for its key's lock: another build is doing the same work", "node", pn.node.id, "key", key)
		if u, err = ps.e.store.LockKey(ps.ctx, key); err != nil {
			return nil, false, err
		}
	}
	return func() {
		if err := u(); err != nil {
			ps.e.cfg.logger.Warn("unlocking node key", "node", pn.node.id, "key", key, "err", err)
		}
	}, ok, nil
}

// tryLockKey takes key's lock only if nobody holds it, without waiting. The Store interface has no
// try form, so it calls LockKey with a context already done: artifacts.Store.LockKey tries the
// flock once before it looks at the context, as its doc says (TestTryLockKey holds it to that). ok is false when
// the lock is held, and when LockKey failed in any other way: the waiting LockKey that follows
// reports that error. A store that looked at the context first would only send every node down
// the waiting path (correct, one more trip through the job queue).
func tryLockKey(s Store, key artifacts.Digest) (unlock func() error, ok bool) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	unlock, err := s.LockKey(ctx, key)
	return unlock, err == nil
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
