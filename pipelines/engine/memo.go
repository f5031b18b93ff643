package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"orkpipe/artifacts"
	"orkpipe/stages"
)

// objectStater is what the build memo needs beyond Store: whether an object is present, and its
// size (*artifacts.Store.Present), and recording the use of objects for the cache's LRU
// (MarkUsed). A store without it gets no memo.
type objectStater interface {
	Present(ctx context.Context, d artifacts.Digest) (artifacts.Object, error)
	MarkUsed(ds []artifacts.Digest)
}

// memoUseInterval: a memo hit records the use of the build's objects (their access markers, the
// LRU order of `cache gc`) only when the memo's last recording is older than this; it is kept as
// the memo file's mtime. A no-op rebuild repeated within the interval so leaves the markers as
// they are (one utimensat per object saved, ~460 for the bench's 27B-shaped graph): GC then sees
// those objects used up to this much earlier than they were, against ages it counts in hours or
// days.
const memoUseInterval = 10 * time.Minute

// binaryKey returns the digest of the running orkpipe executable and its numerics, both through hash.
func binaryKey(ctx context.Context, hash func(context.Context, string) (artifacts.Object, error)) (artifacts.Digest, string, error) {
	exe, err := stages.ExecutablePath()
	if err != nil {
		return artifacts.Digest{}, "", fmt.Errorf("locating the orkpipe executable: %w", err)
	}
	bin, err := hash(ctx, exe)
	if err != nil {
		return artifacts.Digest{}, "", fmt.Errorf("the orkpipe executable %s: %w", exe, err)
	}
	numerics, err := numericsVia(ctx, hash)
	return bin.Digest, numerics, err
}

// binaryKeyWriter returns a hashWriter that has written kind, the executable's digest and its
// numerics (binaryKey): the start of the memo key and of the plan key.
func binaryKeyWriter(ctx context.Context, kind string, hash func(context.Context, string) (artifacts.Object, error)) (*memoWriter, func() artifacts.Digest, error) {
	bin, numerics, err := binaryKey(ctx, hash)
	if err != nil {
		return nil, nil, err
	}
	w, sum := hashWriter()
	w.str(kind)
	w.digest(bin)
	w.str(numerics)
	return w, sum, nil
}

// planKey is the BLAKE3 of what a graph planned from plan (BuildOptions.Plan) depends on besides
// its source files: the running executable (the planner is its code), its numerics, the memory
// budget, the target name and plan.
func (e *Engine) planKey(ctx context.Context, target string, plan artifacts.Digest, hash func(context.Context, string) (artifacts.Object, error)) (artifacts.Digest, error) {
	w, sum, err := binaryKeyWriter(ctx, "orkpipe plan memo key 1", hash)
	if err != nil {
		return artifacts.Digest{}, err
	}
	w.uint(uint64(e.cfg.mem))
	w.str(target)
	w.digest(plan)
	return sum(), nil
}

// numericsVia is stages.NumericsVia; the tests replace it to stand for another OpenBLAS setup.
var numericsVia = stages.NumericsVia

// memoFile is where the build memo of target lives: beside its build records.
func (e *Engine) memoFile(target string) string {
	return filepath.Join(e.cfg.historyDir, url.PathEscape(target), "memo")
}

// memoKey is the BLAKE3 of everything a build of g under target depends on before any node runs:
// the running orkpipe executable (stage kinds, their versions, params binding and planning are
// its code), its numerics (stages.Numerics: in a -tags blas build the OpenBLAS library, kernel set
// and thread count, which are every node's key material but not the executable's code), the
// memory budget (planning refuses nodes above it), the target name, every node's id, stage,
// params and input wiring, the content digest of every source file (through hash: the store's
// stat cache) and the exports. Nodes' keys are a function of these and of their tools' digests,
// which the memo lists and checks separately.
func (e *Engine) memoKey(ctx context.Context, target string, g *Graph, hash func(context.Context, string) (artifacts.Object, error)) (artifacts.Digest, error) {
	w, sum, err := binaryKeyWriter(ctx, "orkpipe build memo key 2", hash)
	if err != nil {
		return artifacts.Digest{}, err
	}
	w.str(target)
	w.uint(uint64(e.cfg.mem))
	w.uint(uint64(len(g.nodes)))
	for _, n := range g.nodes {
		w.str(n.id)
		w.str(n.stage)
		raw, err := n.paramsJSON()
		if err != nil {
			return artifacts.Digest{}, fmt.Errorf("node %q: encoding params: %w", n.id, err)
		}
		w.bytes(raw)
		names := n.inputNames()
		w.uint(uint64(len(names)))
		for _, name := range names {
			in := n.inputs[name]
			w.str(name)
			if in.node != nil {
				w.uint(1)
				w.uint(uint64(in.node.index))
				w.str(in.output)
				continue
			}
			obj, err := hash(ctx, in.path)
			if err != nil {
				return artifacts.Digest{}, fmt.Errorf("node %q: input %q: source file %s: %w", n.id, name, in.path, err)
			}
			w.uint(0)
			w.str(in.path)
			w.digest(obj.Digest)
		}
	}
	w.uint(uint64(len(g.exports)))
	for _, x := range g.exports {
		w.str(x.Name)
		w.uint(uint64(x.From.node.index))
		w.str(x.From.output)
	}
	return sum(), nil
}

// BuildFromMemo serves a build of g from target's build memo when nothing it depends on changed:
// the memo key (memoKey: executable, budget, graph, source digests) matches, every tool still has
// its recorded digest, every node's recorded outputs are in the store with their recorded sizes,
// and every export passes the check Build's exports pass (re-hashed unless the stat cache vouches
// for it; a corrupt one is quarantined). Then it emits the events a no-op Build emits (plan, one
// node_cached per node, summary), materializes and pins the exports and records the build for
// explain, as Build does — without planning, computing node keys or reading action records.
//
// It returns (nil, nil) when the memo cannot serve the build (none, stale, or unreadable — the
// last logged as a warning; or opts.Check is set, which must run nodes); the caller then plans and
// builds. A memo is never trusted without these checks: a corrupt or truncated memo file fails its
// checksum and is a miss. An error is
// returned only for what Build would fail on too (materializing or pinning an export).
//
// The use of the build's objects is recorded for GC (Store.MarkUsed) when the memo last recorded
// it more than memoUseInterval ago; the memo file's mtime is that time.
func (e *Engine) BuildFromMemo(ctx context.Context, target string, g *Graph, opts BuildOptions) (*Result, error) {
	st, ok := e.store.(objectStater)
	if !ok {
		return nil, nil
	}
	return e.buildFromMemo(ctx, target, g, opts, st, func() (*memo, time.Time, func() bool, error) {
		m, used, err := readMemo(e.memoFile(target))
		e.memoUnusable(target, err)
		return m, used, func() bool { return m.outputsStored(ctx, st) }, err
	})
}

// memoUnusable logs why target's memo could not be read, unless it does not exist or is another
// orkpipe's (err nil: nothing).
func (e *Engine) memoUnusable(target string, err error) {
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errMemoVersion) {
		e.cfg.logger.Warn("build memo unusable; planning the build", "target", target, "path", e.memoFile(target), "err", err)
	}
}

// MemoAhead is a target's build memo read ahead of planning: Engine.ReadMemoAhead starts reading it
// and checking that the outputs it lists are in the store while the caller plans the graph, and
// Build then decides as BuildFromMemo does. What is decided is the same either way; only when the
// file is read and the outputs are stat'ed moves (before the memo key is known to match: on a miss
// those stats are wasted, a few milliseconds on another core).
type MemoAhead struct {
	e      *Engine
	target string
	st     objectStater
	done   chan struct{}
	m      *memo
	used   time.Time
	err    error
	stored bool
	taken  bool

	reported sync.Once // memoUnusable, once for both Build and BuildUnplanned
}

// ReadMemoAhead starts reading target's build memo, and checking its outputs, in the background.
// Then call BuildUnplanned, and on its miss Build with the graph planned in the meantime (or only
// Build); a MemoAhead serves at most one build, from one goroutine, and one never built from is
// abandoned harmlessly (it only reads).
func (e *Engine) ReadMemoAhead(ctx context.Context, target string) *MemoAhead {
	a := &MemoAhead{e: e, target: target, done: make(chan struct{})}
	st, ok := e.store.(objectStater)
	if !ok {
		close(a.done)
		return a
	}
	a.st = st
	go func() {
		defer close(a.done)
		if a.m, a.used, a.err = readMemo(e.memoFile(target)); a.err == nil {
			a.stored = a.m.outputsStored(ctx, st)
		}
	}()
	return a
}

// Build is BuildFromMemo of the target ReadMemoAhead was given, from what it read. It may be called
// once: a second call returns (nil, nil), a miss, since the store may have changed since the read.
func (a *MemoAhead) Build(ctx context.Context, g *Graph, opts BuildOptions) (*Result, error) {
	<-a.done
	if a.st == nil || a.taken {
		return nil, nil
	}
	a.reported.Do(func() { a.e.memoUnusable(a.target, a.err) })
	a.taken = true
	return a.e.buildFromMemo(ctx, a.target, g, opts, a.st, func() (*memo, time.Time, func() bool, error) {
		return a.m, a.used, func() bool { return a.stored }, a.err
	})
}

// buildFromMemo is BuildFromMemo with the memo from load: the memo, its mtime, whether the
// outputs it lists are in the store (asked only once the key matched), or the error reading it.
func (e *Engine) buildFromMemo(ctx context.Context, target string, g *Graph, opts BuildOptions, st objectStater,
	load func() (*memo, time.Time, func() bool, error)) (*Result, error) {
	start := time.Now()
	if g.Err() != nil || len(g.nodes) == 0 || ctx.Err() != nil || opts.Check != nil {
		return nil, nil
	}
	path := e.memoFile(target)
	m, used, stored, err := load()
	if err != nil {
		return nil, nil // load reported it
	}
	hash := newSourceHasher(e.store).hash
	key, err := e.memoKey(ctx, target, g, hash)
	if err != nil || key != m.key {
		return nil, nil // a changed input (or one that cannot be read: the planned build says why)
	}
	if why := m.matches(g); why != "" {
		e.cfg.logger.Warn("build memo does not match its graph; planning the build", "target", target, "path", path, "why", why)
		return nil, nil
	}
	return e.serveMemo(ctx, target, start, m, used, stored, opts, st, hash)
}

// BuildUnplanned is Build without a graph: it serves the build from the memo when the memo was
// written by a build given BuildOptions.Plan equal to plan (and this executable, numerics, budget
// and target: planKey), every source file of that build's graph still has the digest it had, and
// everything Build checks holds. It returns (nil, nil) on a miss and leaves the MemoAhead to Build
// then, with the graph planned.
func (a *MemoAhead) BuildUnplanned(ctx context.Context, plan artifacts.Digest, opts BuildOptions) (*Result, error) {
	start := time.Now()
	<-a.done
	if a.st == nil || a.taken {
		return nil, nil
	}
	a.reported.Do(func() { a.e.memoUnusable(a.target, a.err) })
	if a.err != nil || plan.IsZero() || a.m.plan.IsZero() || ctx.Err() != nil || opts.Check != nil {
		return nil, nil
	}
	hash := newSourceHasher(a.e.store).hash
	key, err := a.e.planKey(ctx, a.target, plan, hash)
	if err != nil || key != a.m.plan {
		return nil, nil
	}
	for _, f := range a.m.sources {
		if obj, err := hash(ctx, f.path); err != nil || obj.Digest != f.digest {
			return nil, nil // the planned build reads it again (and says what is wrong with it)
		}
	}
	a.taken = true
	return a.e.serveMemo(ctx, a.target, start, a.m, a.used, func() bool { return a.stored }, opts, a.st, hash)
}

// serveMemo serves a build from memo m, whose key matched: when every tool still has its digest,
// stored says the outputs are in the store and every export verifies, it emits the events of a
// no-op build, delivers the exports and records the build; else it returns (nil, nil).
func (e *Engine) serveMemo(ctx context.Context, target string, start time.Time, m *memo, used time.Time, stored func() bool, opts BuildOptions,
	st objectStater, hash func(context.Context, string) (artifacts.Object, error)) (*Result, error) {
	path := e.memoFile(target)
	for _, t := range m.tools {
		if obj, err := hash(ctx, t.path); err != nil || obj.Digest != t.digest {
			return nil, nil
		}
	}
	if !stored() {
		return nil, nil // collected, quarantined or replaced: the planned build runs its producer
	}
	if now := time.Now(); now.Before(used) || now.Sub(used) >= memoUseInterval {
		st.MarkUsed(m.objects())
		if err := os.Chtimes(path, now, now); err != nil {
			e.cfg.logger.Warn("build memo: recording when its objects were last marked used", "target", target, "path", path, "err", err)
		}
	}
	exports := make([]resolvedExport, len(m.exports))
	for i, x := range m.exports {
		o, ok := m.nodes[x.node].output(x.output)
		if !ok {
			e.cfg.logger.Warn("build memo names an output its node does not have; planning the build", "target", target, "path", path, "export", x.name)
			return nil, nil
		}
		exports[i] = resolvedExport{name: x.name, node: m.nodes[x.node].id, obj: artifacts.Object{Digest: o.Digest, Size: o.Size}}
		if err := e.verifyExport(ctx, o.Digest); err != nil {
			if isCorrupt(err) {
				e.cfg.logger.Warn("export corrupt; quarantined, its producer will run again", "export", x.name, "node", exports[i].node, "err", err)
			}
			return nil, nil
		}
	}

	res := &Result{Target: target, Cached: len(m.nodes), Passes: 1, Exports: map[string]artifacts.Object{}, Outputs: map[string]string{}, Replaced: map[string]string{},
		Nodes: make([]NodeResult, 0, len(m.nodes))}
	// One plan and one node_cached event per node, in one pass: nothing for Build's dedupEmitter
	// to drop.
	emit := func(ev Event) {
		if ev.Time.IsZero() {
			ev.Time = time.Now()
		}
		e.cfg.sink.Emit(ev)
	}
	for _, n := range m.nodes {
		ev := Event{Event: EventPlan, Node: n.id, Stage: n.stage, Time: start, Mem: n.mem}
		for _, d := range n.deps {
			ev.Deps = append(ev.Deps, m.nodes[d].id)
		}
		emit(ev)
	}
	for _, n := range m.nodes {
		outs := make(map[string]string, len(n.outputs))
		for _, o := range n.outputs {
			outs[o.Name] = o.Digest.String()
		}
		emit(Event{Event: EventNodeCached, Node: n.id, Key: n.key.String(), Stage: n.stage, Time: time.Now(), SameAs: n.sameAs, Outputs: outs})
		res.Nodes = append(res.Nodes, NodeResult{ID: n.id, Stage: n.stage, Key: n.key, Outcome: OutcomeCached, SameAs: n.sameAs})
	}
	err := e.deliver(ctx, target, exports, opts, res)
	if err == nil {
		nodes := func(w io.Writer) error { return copyRecords(w, path, m) }
		if herr := e.writeRecord(target, start, nodes); errors.Is(herr, errMemoFormat) {
			// The records (explain's, never a build decision's) are damaged: no record of this
			// build, and no memo, so that the next build plans in full and writes a sound one.
			e.cfg.logger.Warn("build memo records damaged; memo removed, the next build plans in full", "target", target, "path", path, "err", herr)
			os.Remove(path)
		} else if herr != nil {
			e.cfg.logger.Warn("recording the build for explain", "target", target, "err", herr)
		}
	}
	res.Duration = time.Since(start)
	e.summarize(emit, res, err)
	return res, err
}

// objects returns the digests of every node's recorded outputs.
func (m *memo) objects() []artifacts.Digest {
	var ds []artifacts.Digest
	for _, n := range m.nodes {
		for _, o := range n.outputs {
			ds = append(ds, o.Digest)
		}
	}
	return ds
}

// outputsStored reports whether every node's recorded outputs are in the store with their
// recorded sizes; the stats are spread over the CPUs.
func (m *memo) outputsStored(ctx context.Context, st objectStater) bool {
	var objs []artifacts.NamedObject
	for _, n := range m.nodes {
		objs = append(objs, n.outputs...)
	}
	workers := min(runtime.GOMAXPROCS(0), len(objs)/64+1)
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			for i := w; i < len(objs); i += workers {
				got, err := st.Present(gctx, objs[i].Digest)
				if err != nil {
					return err
				}
				if got.Size != objs[i].Size {
					return fmt.Errorf("object %s: %d bytes, recorded %d", objs[i].Digest, got.Size, objs[i].Size)
				}
			}
			return nil
		})
	}
	return g.Wait() == nil
}

// output returns the recorded output called name.
func (n *memoNode) output(name string) (artifacts.NamedObject, bool) {
	for _, o := range n.outputs {
		if o.Name == name {
			return o, true
		}
	}
	return artifacts.NamedObject{}, false
}

// matches reports why m cannot describe g ("" if it can): the key covers the graph, so this only
// catches a memo written wrongly.
func (m *memo) matches(g *Graph) string {
	if len(m.nodes) != len(g.nodes) {
		return fmt.Sprintf("%d nodes recorded, the graph has %d", len(m.nodes), len(g.nodes))
	}
	for i, n := range g.nodes {
		if m.nodes[i].id != n.id || m.nodes[i].stage != n.stage {
			return fmt.Sprintf("node %d is %q (%s), recorded %q (%s)", i, n.id, n.stage, m.nodes[i].id, m.nodes[i].stage)
		}
	}
	if len(m.exports) != len(g.exports) {
		return fmt.Sprintf("%d exports recorded, the graph has %d", len(m.exports), len(g.exports))
	}
	for i, x := range g.exports {
		if r := m.exports[i]; r.name != x.Name || r.node != x.From.node.index || r.output != x.From.output {
			return fmt.Sprintf("export %q recorded as %q", x.Name, r.name)
		}
	}
	return ""
}

// readMemo reads and decodes the head of the memo file at path (decodeMemoHead: everything but
// the records, which it checks the file's size holds); used is its mtime (when the memo last
// recorded the use of its objects).
func readMemo(path string) (m *memo, used time.Time, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, used, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, used, err
	}
	if fi.Size() > memoMaxSize {
		return nil, used, fmt.Errorf("%w: %d bytes, more than %d", errMemoFormat, fi.Size(), memoMaxSize)
	}
	var head [memoHeadSize]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return nil, used, fmt.Errorf("%w: reading %s: %w", errMemoFormat, path, err)
	}
	n, err := memoBodyLen(head[:])
	if err != nil {
		return nil, used, err
	}
	if n > uint64(fi.Size()) {
		return nil, used, fmt.Errorf("%w: body length %d in a %d-byte file", errMemoFormat, n, fi.Size())
	}
	b := make([]byte, memoHeadSize+int(n)+32)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, used, fmt.Errorf("%w: reading %s: %w", errMemoFormat, path, err)
	}
	if m, err = decodeMemoHead(b); err != nil {
		return nil, used, err
	}
	if fi.Size() != m.recordsOff+m.recordsLen {
		return nil, used, fmt.Errorf("%w: %d bytes, the memo says %d (truncated or extended)", errMemoFormat, fi.Size(), m.recordsOff+m.recordsLen)
	}
	return m, fi.ModTime(), nil
}

// copyRecords writes the records of m, read from the memo file at path, to w and checks them
// against their recorded length and BLAKE3 (the file may have been damaged or replaced since
// readMemo: then the error says so, and the caller discards what was written).
func copyRecords(w io.Writer, path string, m *memo) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := artifacts.NewHasher()
	n, err := io.Copy(io.MultiWriter(w, h), io.NewSectionReader(f, m.recordsOff, m.recordsLen))
	if err != nil {
		return fmt.Errorf("copying the records of %s: %w", path, err)
	}
	if n != m.recordsLen || artifacts.DigestOf(h) != m.recordsDigest {
		return fmt.Errorf("%w: the records of %s changed since it was read (%d bytes)", errMemoFormat, path, n)
	}
	return nil
}

// writeMemo records the outcome of a build in which every node was cached or executed, for
// BuildFromMemo. Its key is computed with the digests the pass used (ps.sources), so a source
// that changed meanwhile makes the next build a miss. Failing only costs the next build its
// shortcut, so errors are logged by the caller.
func (e *Engine) writeMemo(ctx context.Context, target string, ps *pass, plan artifacts.Digest) error {
	if _, ok := e.store.(objectStater); !ok {
		return nil
	}
	key, err := e.memoKey(ctx, target, ps.p.graph, ps.sources.hash)
	if err != nil {
		return err
	}
	m := &memo{key: key, nodes: make([]memoNode, len(ps.states)), exports: ps.p.exports}
	if !plan.IsZero() {
		if m.plan, err = e.planKey(ctx, target, plan, ps.sources.hash); err != nil {
			return err
		}
	}
	for _, p := range ps.p.graph.SourceFiles() {
		obj, err := ps.sources.hash(ctx, p)
		if err != nil {
			return err
		}
		m.sources = append(m.sources, memoTool{path: p, digest: obj.Digest})
	}
	tools := map[string]bool{}
	for i, s := range ps.states {
		pn := ps.p.nodes[i]
		if s.outcome != OutcomeCached && s.outcome != OutcomeExecuted || s.material == nil {
			return fmt.Errorf("node %q: %s, not memoized", pn.node.id, s.outcome)
		}
		rec, err := json.Marshal(RecordedNode{ID: pn.node.id, Stage: pn.node.stage, Key: s.key.String(), Outcome: OutcomeCached.String(), SameAs: s.sameAs, Material: s.material})
		if err != nil {
			return err
		}
		if i > 0 {
			m.records = append(m.records, ',')
		}
		m.records = append(m.records, rec...)
		n := memoNode{id: pn.node.id, stage: pn.node.stage, key: s.key, sameAs: s.sameAs, mem: pn.spec.PeakMemory, deps: pn.deps}
		for _, name := range pn.spec.Outputs {
			f, ok := s.outputs[name]
			if !ok {
				return fmt.Errorf("node %q: output %q missing", pn.node.id, name)
			}
			n.outputs = append(n.outputs, artifacts.NamedObject{Name: name, Digest: f.Digest, Size: f.Size})
		}
		m.nodes[i] = n
		for _, t := range pn.spec.Tools {
			if !tools[t.Path] {
				tools[t.Path] = true
				obj, err := ps.sources.hash(ctx, t.Path)
				if err != nil {
					return err
				}
				m.tools = append(m.tools, memoTool{path: t.Path, digest: obj.Digest})
			}
		}
	}
	return writeFileAtomic(e.memoFile(target), encodeMemo(m))
}

// writeFileAtomic writes the pieces of b, in order, to path through a temp file in its directory
// and a rename. It does not fsync: a torn memo or record fails to parse and is a miss.
func writeFileAtomic(path string, b ...[]byte) error {
	return writeFileAtomicFunc(path, func(w io.Writer) error {
		for _, p := range b {
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeFileAtomicFunc is writeFileAtomic with the content written by fill; if fill fails, nothing
// is renamed into place. The temp file is artifacts.CreateTemp's: locked while this writer runs, so
// the next writer in the directory removes it if this one is killed before its rename.
func writeFileAtomicFunc(path string, fill func(w io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, name, err := artifacts.CreateTemp(path)
	if err != nil {
		return err
	}
	defer tmp.Close()     // last: the lock keeps a sweeper off the file until it is renamed or removed
	defer os.Remove(name) // nothing once renamed
	if err := fill(tmp); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(name, path)
}
