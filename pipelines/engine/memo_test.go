package engine_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// memoGraph has a source file, a tool, two nodes with identical key material (b and b2) and
// exports from both branches.
func memoGraph(src, tool, xTag string) *engine.Graph {
	g := engine.NewGraph()
	a := node(g, "a", testParams{Size: 4096}, map[string]engine.Input{"src": engine.File(src)})
	node(g, "b", testParams{}, nil)
	b2 := node(g, "b2", testParams{Tag: "b"}, nil)
	x := node(g, "x", testParams{Tag: xTag}, map[string]engine.Input{"in": a.Output("out")})
	tl := g.Add("t", "test-tool", toolParams{Tool: tool}, nil)
	z := node(g, "z", testParams{}, map[string]engine.Input{"l": x.Output("out"), "r": b2.Output("out"), "t": tl.Output("out")})
	g.Export("z.bin", z.Output("out"))
	g.Export("b.bin", g.Node("b").Output("out"))
	planKeys.Store(g, artifacts.SumBytes([]byte(src+"\x00"+tool+"\x00"+xTag)))
	return g
}

// eventLog is a sink keeping every event, and the text of every warning logged.
type eventLog struct {
	mu   sync.Mutex
	evs  []engine.Event
	logs bytes.Buffer
}

func (l *eventLog) Emit(ev engine.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

func (l *eventLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.logs.Write(p)
}

// take returns the events so far in a comparable form (no times or durations; node events
// sorted, since a pass emits them from concurrent goroutines) and forgets them.
func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		ev.Time, ev.DurationMS = time.Time{}, 0
		if ev.Summary != nil {
			sum := *ev.Summary
			sum.DurationMS = 0
			ev.Summary = &sum
		}
		b, _ := json.Marshal(ev)
		s, _ := json.Marshal(ev.Summary)
		out = append(out, string(b)+string(s))
	}
	l.evs = nil
	slices.Sort(out)
	return out
}

func (l *eventLog) warnings() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.logs.String()
	l.logs.Reset()
	return s
}

type memoFixture struct {
	t          *testing.T
	store      *artifacts.Store
	e          *engine.Engine
	log        *eventLog
	src, tool  string
	opts       engine.BuildOptions
	historyDir string
	way        memoWay
}

// memoWay is how a test reads the build memo.
type memoWay int

const (
	fromMemo  memoWay = iota // Engine.BuildFromMemo
	ahead                    // Engine.ReadMemoAhead, then MemoAhead.Build with the graph
	unplanned                // builds record a plan key (BuildOptions.Plan); MemoAhead.BuildUnplanned
)

func (w memoWay) String() string {
	return [...]string{"BuildFromMemo", "ReadMemoAhead", "BuildUnplanned"}[w]
}

// planKeys stands for build.Target.PlanKey in these tests: memoGraph records, for each graph, the
// digest of what it was made from.
var planKeys sync.Map // *engine.Graph -> artifacts.Digest

// optsFor returns the fixture's build options for g: with g's plan key when the way is unplanned.
func (f *memoFixture) optsFor(g *engine.Graph) engine.BuildOptions {
	o := f.opts
	if f.way == unplanned {
		p, _ := planKeys.Load(g)
		o.Plan = p.(artifacts.Digest)
	}
	return o
}

func newMemoFixture(t *testing.T) *memoFixture {
	dir := t.TempDir()
	f := &memoFixture{t: t, store: openStore(t, filepath.Join(dir, "store")), log: &eventLog{},
		src: filepath.Join(dir, "source.bin"), tool: filepath.Join(dir, "tool.bin"), opts: engine.BuildOptions{OutDir: filepath.Join(dir, "out")}}
	f.historyDir = engine.HistoryDir(f.store.Dir())
	for _, p := range []string{f.src, f.tool} {
		if err := os.WriteFile(p, []byte("first "+filepath.Base(p)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.e = f.engine(1 << 30)
	return f
}

func (f *memoFixture) engine(mem int64) *engine.Engine {
	return newEngine(f.t, f.store, engine.WithMemoryBudget(mem), engine.WithSink(f.log),
		engine.WithLogger(slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelWarn}))))
}

// fromMemo tries the memo; it fails the test on an error.
func (f *memoFixture) fromMemo(g *engine.Graph) *engine.Result {
	f.t.Helper()
	ctx := context.Background()
	var res *engine.Result
	var err error
	switch f.way {
	case ahead:
		res, err = f.e.ReadMemoAhead(ctx, "memo").Build(ctx, g, f.opts)
	case unplanned:
		o := f.optsFor(g)
		res, err = f.e.ReadMemoAhead(ctx, "memo").BuildUnplanned(ctx, o.Plan, o)
	default:
		res, err = f.e.BuildFromMemo(ctx, "memo", g, f.opts)
	}
	if err != nil {
		f.t.Fatalf("%v: %v", f.way, err)
	}
	return res
}

// memoWays runs test for every way a build memo is read.
func memoWays(t *testing.T, test func(t *testing.T, way memoWay)) {
	for _, way := range []memoWay{fromMemo, ahead, unplanned} {
		t.Run(way.String(), func(t *testing.T) { test(t, way) })
	}
}

// warm builds g in full twice (the second lets the stat cache vouch for the exports, past its
// racy window) and forgets the events.
func (f *memoFixture) warm(g *engine.Graph) {
	f.t.Helper()
	mustBuild(f.t, f.e, "memo", g, f.optsFor(g))
	time.Sleep(250 * time.Millisecond)
	mustBuild(f.t, f.e, "memo", g, f.optsFor(g))
	f.log.take()
}

// TestBuildFromMemoIsANoopBuild: once a build has run, BuildFromMemo serves the same graph with
// exactly the events, result, outputs and build record a no-op Build gives, running nothing.
func TestBuildFromMemoIsANoopBuild(t *testing.T) { memoWays(t, testBuildFromMemoIsANoopBuild) }

func testBuildFromMemoIsANoopBuild(t *testing.T, way memoWay) {
	resetCounts()
	f := newMemoFixture(t)
	f.way = way
	g := memoGraph(f.src, f.tool, "x")
	if res := f.fromMemo(g); res != nil {
		t.Fatalf("BuildFromMemo before any build served %+v", res)
	}
	f.warm(g)
	noop := mustBuild(t, f.e, "memo", g, f.optsFor(g))
	want := f.log.take()
	resetCounts()
	res := f.fromMemo(g)
	if res == nil {
		t.Fatalf("BuildFromMemo after a build: a miss (warnings: %s)", f.log.warnings())
	}
	if got := executedTags(); got != "" {
		t.Errorf("BuildFromMemo executed %q", got)
	}
	if got := f.log.take(); !slices.Equal(got, want) {
		t.Errorf("BuildFromMemo events differ from a no-op Build's:\n got %s\nwant %s", strings.Join(got, "\n    "), strings.Join(want, "\n    "))
	}
	if res.Executed != 0 || res.Cached != 6 || res.Passes != 1 || fmt.Sprint(res.Exports) != fmt.Sprint(noop.Exports) ||
		fmt.Sprint(res.Outputs) != fmt.Sprint(noop.Outputs) || fmt.Sprint(res.Nodes) != fmt.Sprint(noop.Nodes) {
		t.Errorf("BuildFromMemo result %+v, want that of the no-op Build %+v", res, noop)
	}
	if b, b2 := nodeResult(t, res, "b").SameAs, nodeResult(t, res, "b2").SameAs; b+b2 != "b" && b+b2 != "b2" {
		t.Errorf("b same as %q, b2 same as %q: want one to name the other", b, b2)
	}
	recs, err := engine.History(context.Background(), f.historyDir, "memo", 2)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(recs[0].Nodes)
	b, _ := json.Marshal(recs[1].Nodes)
	if !bytes.Equal(a, b) {
		t.Errorf("build record of BuildFromMemo:\n%s\nno-op Build's:\n%s", a, b)
	}
	if w := f.log.warnings(); w != "" {
		t.Errorf("warnings: %s", w)
	}
}

// TestBuildFromMemoMarksUseOncePerInterval: a memo hit records the use of the build's objects
// (their access markers, GC's LRU order) only when the memo's mtime says it last did so
// MemoUseInterval ago or more (or in the future), and then moves that mtime to now.
func TestBuildFromMemoMarksUseOncePerInterval(t *testing.T) {
	f := newMemoFixture(t)
	g := memoGraph(f.src, f.tool, "x")
	f.warm(g)
	x := outputOf(t, f, "x") // an intermediate object, not an export (exports are pinned, and stat-ed by Pin)
	marker := filepath.Join(f.store.Dir(), "access", x.Hex()[:2], x.Hex())
	memoPath := filepath.Join(f.historyDir, "memo", "memo")
	old := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	mtime := func(p string) time.Time {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	for _, tc := range []struct {
		name     string
		memoTime time.Time
		marked   bool
	}{
		{"memo marked a minute ago", time.Now().Add(-time.Minute), false},
		{"memo marked just over the interval ago", time.Now().Add(-engine.MemoUseInterval - time.Second), true},
		{"memo time in the future", time.Now().Add(time.Hour), true},
	} {
		if err := os.Chtimes(marker, old, old); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(memoPath, tc.memoTime, tc.memoTime); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if f.fromMemo(g) == nil {
			t.Fatalf("%s: no memo hit (warnings: %s)", tc.name, f.log.warnings())
		}
		got, memo := mtime(marker), mtime(memoPath)
		if !tc.marked {
			if !got.Equal(old) {
				t.Errorf("%s: access marker moved to %s, want it left at %s", tc.name, got, old)
			}
			if !memo.Equal(tc.memoTime) {
				t.Errorf("%s: memo mtime moved to %s, want it left at %s", tc.name, memo, tc.memoTime)
			}
			continue
		}
		if got.Before(before.Add(-time.Second)) {
			t.Errorf("%s: access marker at %s, want it marked used now (%s)", tc.name, got, before)
		}
		if memo.Before(before.Add(-time.Second)) || memo.After(time.Now().Add(time.Second)) {
			t.Errorf("%s: memo mtime %s, want now (%s)", tc.name, memo, before)
		}
	}
	if w := f.log.warnings(); w != "" {
		t.Errorf("warnings: %s", w)
	}
}

// TestBuildFromMemoGuards: each thing a build depends on, changed, makes the memo a miss, and the
// planned build then runs exactly what the change concerns.
func TestBuildFromMemoGuards(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(f *memoFixture) *engine.Graph // returns the graph to build next
		want   string                             // tags executed by the planned build
		warns  string                             // in the warnings logged by BuildFromMemo
	}{
		{name: "source file", want: "a,x,z", change: func(f *memoFixture) *engine.Graph {
			writeFile(t, f.src, "second source")
			return memoGraph(f.src, f.tool, "x")
		}},
		{name: "params", want: "x2,z", change: func(f *memoFixture) *engine.Graph { return memoGraph(f.src, f.tool, "x2") }},
		{name: "tool", want: "tool,z", change: func(f *memoFixture) *engine.Graph {
			writeFile(t, f.tool, "second tool")
			return memoGraph(f.src, f.tool, "x")
		}},
		{name: "memory budget", want: "", change: func(f *memoFixture) *engine.Graph {
			f.e = f.engine(1<<30 + 1)
			return memoGraph(f.src, f.tool, "x")
		}},
		{name: "executable", want: "", change: func(f *memoFixture) *engine.Graph {
			exe := filepath.Join(t.TempDir(), "orkpipe")
			writeFile(t, exe, "another orkpipe than "+f.src) // f's own: the cleanup comes after both ways
			old := stages.ExecutablePath
			stages.ExecutablePath = func() (string, error) { return exe, nil }
			t.Cleanup(func() { stages.ExecutablePath = old })
			return memoGraph(f.src, f.tool, "x")
		}},
		{name: "intermediate object removed", want: "x", change: func(f *memoFixture) *engine.Graph {
			removeOutput(t, f, "x")
			return memoGraph(f.src, f.tool, "x")
		}},
		{name: "export corrupted", want: "z", warns: "export corrupt", change: func(f *memoFixture) *engine.Graph {
			p := objectPath(t, f.store, outputOf(t, f, "z"))
			flipByte(t, p, 0)
			f.opts.OutDir = t.TempDir() // the old z.bin shares the corrupted inode
			return memoGraph(f.src, f.tool, "x")
		}},
		{name: "memo truncated", want: "", warns: "build memo unusable", change: func(f *memoFixture) *engine.Graph {
			rewriteMemo(t, f, func(b []byte) []byte { return b[:len(b)-7] })
			return memoGraph(f.src, f.tool, "x")
		}},
		{name: "memo byte flipped", want: "", warns: "checksum mismatch", change: func(f *memoFixture) *engine.Graph {
			rewriteMemo(t, f, func(b []byte) []byte { b[16+memoBodyLen(t, b)/2] ^= 1; return b })
			return memoGraph(f.src, f.tool, "x")
		}},
		{name: "memo records truncated", want: "", warns: "truncated or extended", change: func(f *memoFixture) *engine.Graph {
			rewriteMemo(t, f, func(b []byte) []byte { return b[:len(b)-1] })
			return memoGraph(f.src, f.tool, "x")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			memoWays(t, func(t *testing.T, way memoWay) {
				resetCounts()
				f := newMemoFixture(t)
				f.way = way
				f.warm(memoGraph(f.src, f.tool, "x"))
				if f.fromMemo(memoGraph(f.src, f.tool, "x")) == nil {
					t.Fatalf("no memo hit before the change (warnings: %s)", f.log.warnings())
				}
				f.log.warnings()
				time.Sleep(20 * time.Millisecond) // a rewritten file gets another mtime
				g := tc.change(f)
				if res := f.fromMemo(g); res != nil {
					t.Fatalf("BuildFromMemo served the build after the change: executed %d cached %d", res.Executed, res.Cached)
				}
				if w := f.log.warnings(); tc.warns == "" && w != "" || !strings.Contains(w, tc.warns) {
					t.Errorf("warnings %q, want them to mention %q", w, tc.warns)
				}
				resetCounts()
				mustBuild(t, f.e, "memo", g, f.optsFor(g))
				if got := executedTags(); got != tc.want {
					t.Errorf("the planned build after the change executed %q, want %q", got, tc.want)
				}
				// That build wrote a new memo: the next one is served from it, running nothing.
				resetCounts()
				if f.fromMemo(g) == nil || executedTags() != "" {
					t.Errorf("no memo hit after the planned build (warnings: %s)", f.log.warnings())
				}
			})
		})
	}
}

// TestBuildUnplannedNeedsAPlanKey: a memo written by a build given no plan key (BuildOptions.Plan
// zero) never serves BuildUnplanned, and one written under another plan key does not either; the
// same MemoAhead then serves Build with the planned graph.
func TestBuildUnplannedNeedsAPlanKey(t *testing.T) {
	f := newMemoFixture(t)
	g := memoGraph(f.src, f.tool, "x")
	f.warm(g) // way fromMemo: no plan key recorded
	ctx := context.Background()
	p, _ := planKeys.Load(g)
	for _, plan := range []artifacts.Digest{p.(artifacts.Digest), {}} {
		a := f.e.ReadMemoAhead(ctx, "memo")
		if res, err := a.BuildUnplanned(ctx, plan, f.opts); err != nil || res != nil {
			t.Fatalf("BuildUnplanned(%v) of a memo without a plan key: %+v, %v; want a miss", plan, res, err)
		}
		if res, err := a.Build(ctx, g, f.opts); err != nil || res == nil {
			t.Fatalf("Build after the unplanned miss: %v, %v (warnings: %s)", res, err, f.log.warnings())
		}
	}
	f.way = unplanned
	f.warm(g)
	a := f.e.ReadMemoAhead(ctx, "memo")
	if res, err := a.BuildUnplanned(ctx, artifacts.SumBytes([]byte("another recipe")), f.opts); err != nil || res != nil {
		t.Fatalf("BuildUnplanned under another plan key: %+v, %v; want a miss", res, err)
	}
	if f.fromMemo(g) == nil {
		t.Errorf("no BuildUnplanned hit under the memo's plan key (warnings: %s)", f.log.warnings())
	}
}

// TestMemoAheadBuildsOnce: a memo read ahead serves one build; a second Build of it is a miss,
// since what it read (the outputs' presence above all) may be stale by then.
func TestMemoAheadBuildsOnce(t *testing.T) {
	f := newMemoFixture(t)
	g := memoGraph(f.src, f.tool, "x")
	f.warm(g)
	ctx := context.Background()
	a := f.e.ReadMemoAhead(ctx, "memo")
	if res, err := a.Build(ctx, g, f.opts); err != nil || res == nil {
		t.Fatalf("first Build: %v, %v (warnings: %s)", res, err, f.log.warnings())
	}
	if res, err := a.Build(ctx, g, f.opts); err != nil || res != nil {
		t.Fatalf("second Build of one MemoAhead: %+v, %v; want a miss", res, err)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// memoBodyLen returns the body length in the header of memo file b (package doc, "Build memo").
func memoBodyLen(t *testing.T, b []byte) int {
	t.Helper()
	if len(b) < 16 {
		t.Fatalf("memo of %d bytes", len(b))
	}
	return int(binary.LittleEndian.Uint64(b[8:16]))
}

// TestBuildFromMemoNumerics: a build memo is not served to a binary computing with other numerics
// (a -tags blas build after OpenBLAS was upgraded, or run with another OPENBLAS_NUM_THREADS or
// OPENBLAS_CORETYPE): every node's key names the numerics, so the outputs the memo lists are not
// this build's. Back on the memo's numerics, it serves again.
func TestBuildFromMemoNumerics(t *testing.T) { memoWays(t, testBuildFromMemoNumerics) }

func testBuildFromMemoNumerics(t *testing.T, way memoWay) {
	f := newMemoFixture(t)
	f.way = way
	g := memoGraph(f.src, f.tool, "x")
	f.warm(g)
	if f.fromMemo(g) == nil {
		t.Fatalf("no memo hit before the change (warnings: %s)", f.log.warnings())
	}
	t.Run("other numerics", func(t *testing.T) {
		engine.SetNumerics(t, "openblas HASWELL 0123 threads 1")
		if res := f.fromMemo(g); res != nil {
			t.Fatalf("BuildFromMemo served a build made with other numerics: executed %d cached %d", res.Executed, res.Cached)
		}
	})
	if f.fromMemo(g) == nil {
		t.Errorf("no memo hit with the memo's own numerics again (warnings: %s)", f.log.warnings())
	}
}

// TestBuildFromMemoDamagedRecords: a memo whose records (the no-op's build record for explain;
// no build decision reads them) are damaged after its checksummed head still serves the build,
// writes no build record from them, warns, and is removed: the next build plans in full and
// writes a sound memo.
func TestBuildFromMemoDamagedRecords(t *testing.T) {
	f := newMemoFixture(t)
	g := memoGraph(f.src, f.tool, "x")
	f.warm(g)
	before, err := engine.History(context.Background(), f.historyDir, "memo", 20)
	if err != nil {
		t.Fatal(err)
	}
	rewriteMemo(t, f, func(b []byte) []byte { b[len(b)-3] ^= 1; return b })
	if f.fromMemo(g) == nil {
		t.Fatalf("damaged records: a miss (warnings: %s)", f.log.warnings())
	}
	if w := f.log.warnings(); !strings.Contains(w, "records damaged") {
		t.Errorf("warnings %q, want the damaged records named", w)
	}
	after, err := engine.History(context.Background(), f.historyDir, "memo", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) || !after[0].Time.Equal(before[0].Time) {
		t.Errorf("%d build records, newest %s; want the %d before, newest %s (none written from damaged records)", len(after), after[0].Time, len(before), before[0].Time)
	}
	if _, err := os.Stat(filepath.Join(f.historyDir, "memo", "memo")); !os.IsNotExist(err) {
		t.Errorf("memo with damaged records left in place (stat: %v)", err)
	}
	if f.fromMemo(g) != nil {
		t.Fatal("served from a removed memo")
	}
	resetCounts()
	mustBuild(t, f.e, "memo", g, f.opts)
	if f.fromMemo(g) == nil || executedTags() != "" {
		t.Errorf("no memo hit after the planned build (warnings: %s)", f.log.warnings())
	}
}

// rewriteMemo replaces the memo file of the fixture's target by edit of its bytes.
func rewriteMemo(t *testing.T, f *memoFixture, edit func([]byte) []byte) {
	t.Helper()
	p := filepath.Join(f.historyDir, "memo", "memo")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p, string(edit(b)))
}

// outputOf returns the digest of node id's output in the newest build record.
func outputOf(t *testing.T, f *memoFixture, id string) artifacts.Digest {
	t.Helper()
	recs, err := engine.History(context.Background(), f.historyDir, "memo", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range recs[0].Nodes {
		if n.ID == id {
			k, err := artifacts.ParseDigest(n.Key)
			if err != nil {
				t.Fatal(err)
			}
			return objectOf(t, f.store, k)
		}
	}
	t.Fatalf("no node %q recorded", id)
	return artifacts.Digest{}
}

func removeOutput(t *testing.T, f *memoFixture, id string) {
	t.Helper()
	p := objectPath(t, f.store, outputOf(t, f, id))
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

// The build record and the memo are written through locked temp files in the history directory: a
// temp file a killed build left there (its lock gone with the process) is removed by the next
// build's writes, a live writer's is not.
func TestHistorySweepsDeadTemps(t *testing.T) {
	f := newMemoFixture(t)
	dir := filepath.Join(f.historyDir, "memo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, ".orkpipe-0123456789abcdef.tmp")
	live := filepath.Join(dir, ".orkpipe-fedcba9876543210.tmp")
	testfiles.DeadAndLiveTemps(t, dead, live, []byte(`{"target":"memo","nodes":[`))
	mustBuild(t, f.e, "memo", memoGraph(f.src, f.tool, "x"), f.opts)
	var temps []string
	for _, name := range testfiles.DirNames(t, dir) {
		if strings.HasPrefix(name, ".orkpipe-") {
			temps = append(temps, name)
		}
	}
	if want := []string{filepath.Base(live)}; !slices.Equal(temps, want) {
		t.Fatalf("%s holds the temp files %v, want %v (the dead writer's removed, the live one's kept)", dir, temps, want)
	}
}
