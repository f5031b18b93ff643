package engine_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// testParams drive the "test-node" stage kind, registered only in this test binary. Its output
// "out" is: every input's bytes in input-name order, then the tag, then Size bytes derived from
// the tag. It is a real stage run through the real engine and store; the knobs make it slow,
// memory-hungry (declared only), failing or blocking on demand.
type testParams struct {
	Tag     string   `json:"tag"`
	Inputs  []string `json:"inputs,omitempty"`
	Size    int      `json:"size,omitempty"`
	Mem     int64    `json:"mem,omitempty"` // declared peak memory (default 1 MiB)
	SleepMS int      `json:"sleep_ms,omitempty"`
	Fail    bool     `json:"fail,omitempty"`
	Block   bool     `json:"block,omitempty"` // with ORKPIPE_TEST_BLOCK=1: write part of the output, then wait for ctx
	Gate    string   `json:"gate,omitempty"`  // wait until the test opens this gate (newGate) or ctx ends
}

// Instrumentation of test-node runs in this process.
var (
	execMu    sync.Mutex
	execCount = map[string]int{}
	memRun    atomic.Int64 // sum of declared memory of test-node runs in progress
	memPeak   atomic.Int64
)

func init() {
	stages.Register(stages.Define("test-node", 1, func(p testParams) (stages.Spec, error) {
		if p.Tag == "" {
			return stages.Spec{}, errors.New("field \"tag\": empty")
		}
		mem := p.Mem
		if mem == 0 {
			mem = 1 << 20
		}
		return stages.Spec{Inputs: p.Inputs, Outputs: []string{"out"}, PeakMemory: mem}, nil
	}, runTestNode))
	// "test-tool" runs an external tool (here: a file it copies) and counts its runs as "tool".
	stages.Register(stages.Define("test-tool", 1, func(p toolParams) (stages.Spec, error) {
		return stages.Spec{Outputs: []string{"out"}, PeakMemory: 1 << 20, Tools: []stages.Tool{{Name: "bin", Path: p.Tool}}}, nil
	}, func(_ context.Context, _ toolParams, req stages.Request) error {
		execMu.Lock()
		execCount["tool"]++
		execMu.Unlock()
		b, err := os.ReadFile(req.Tools["bin"].Path)
		if err != nil {
			return err
		}
		return os.WriteFile(req.Output("out"), b, 0o644)
	}))
}

type toolParams struct {
	Tool string `json:"tool"`
}

func runTestNode(ctx context.Context, p testParams, req stages.Request) error {
	mem := p.Mem
	if mem == 0 {
		mem = 1 << 20
	}
	cur := memRun.Add(mem)
	for peak := memPeak.Load(); cur > peak && !memPeak.CompareAndSwap(peak, cur); peak = memPeak.Load() {
	}
	defer memRun.Add(-mem)
	execMu.Lock()
	execCount[p.Tag]++
	execMu.Unlock()
	if p.Gate != "" {
		g, ok := gates.Load(p.Gate)
		if !ok {
			return fmt.Errorf("test-node %q: gate %q not made by newGate in this process", p.Tag, p.Gate)
		}
		select {
		case <-g.(chan struct{}):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if log := os.Getenv("ORKPIPE_TEST_EXECLOG"); log != "" {
		f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "%s %d\n", p.Tag, os.Getpid())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if p.Fail {
		return fmt.Errorf("test-node %q fails on purpose", p.Tag)
	}
	out, err := os.Create(req.Output("out"))
	if err != nil {
		return err
	}
	defer out.Close()
	names := append([]string(nil), p.Inputs...)
	sort.Strings(names)
	for _, n := range names {
		b, err := os.ReadFile(req.Inputs[n].Path)
		if err != nil {
			return err
		}
		if _, err := out.Write(b); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "<%s>", p.Tag)
	seed := sha256.Sum256([]byte(p.Tag))
	tail := make([]byte, p.Size)
	for i := range tail {
		tail[i] = seed[i%len(seed)] ^ byte(i)
	}
	if _, err := out.Write(tail); err != nil {
		return err
	}
	if p.Block && os.Getenv("ORKPIPE_TEST_BLOCK") == "1" {
		if err := out.Sync(); err != nil {
			return err
		}
		if m := os.Getenv("ORKPIPE_TEST_MARKER"); m != "" {
			// Published by rename: the tests poll for the marker and read it at once, and a
			// plain WriteFile lets them see it created but still empty.
			if err := os.WriteFile(m+".tmp", []byte(req.OutDir), 0o644); err != nil {
				return err
			}
			if err := os.Rename(m+".tmp", m); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Minute):
			return errors.New("test-node: blocked for 2 minutes without being canceled")
		}
	}
	if p.SleepMS > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(p.SleepMS) * time.Millisecond):
		}
	}
	return nil
}

// gates holds the channels test-node runs with a Gate wait on, by gate name (newGate).
var gates sync.Map

// newGate makes a gate named after the test for test-node's Gate and returns its name and the
// function that opens it (again: no effect). The gate opens and goes when the test ends.
func newGate(t testing.TB) (name string, open func()) {
	t.Helper()
	name = t.Name()
	ch := make(chan struct{})
	if _, dup := gates.LoadOrStore(name, ch); dup {
		t.Fatalf("gate %q made twice", name)
	}
	var once sync.Once
	open = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(func() { open(); gates.Delete(name) })
	return name, open
}

func resetCounts() {
	execMu.Lock()
	execCount = map[string]int{}
	execMu.Unlock()
	memPeak.Store(0)
}

func counts() map[string]int {
	execMu.Lock()
	defer execMu.Unlock()
	out := map[string]int{}
	for k, v := range execCount {
		out[k] = v
	}
	return out
}

// executedTags returns the sorted tags run since resetCounts.
func executedTags() string {
	var tags []string
	for k, v := range counts() {
		for range v {
			tags = append(tags, k)
		}
	}
	sort.Strings(tags)
	return strings.Join(tags, ",")
}

func openStore(t testing.TB, dir string) *artifacts.Store {
	t.Helper()
	s, err := artifacts.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newEngine(t testing.TB, s engine.Store, opts ...engine.Option) *engine.Engine {
	t.Helper()
	e, err := engine.New(s, append([]engine.Option{engine.WithJobs(4), engine.WithMemoryBudget(1 << 30)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func build(t testing.TB, ctx context.Context, e *engine.Engine, target string, g *engine.Graph, opts engine.BuildOptions) (*engine.Result, error) {
	t.Helper()
	p, err := e.Plan(g)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return e.Build(ctx, target, p, opts)
}

func mustBuild(t testing.TB, e *engine.Engine, target string, g *engine.Graph, opts engine.BuildOptions) *engine.Result {
	t.Helper()
	res, err := build(t, context.Background(), e, target, g, opts)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return res
}

func node(g *engine.Graph, id string, p testParams, inputs map[string]engine.Input) *engine.Node {
	if p.Tag == "" {
		p.Tag = id
	}
	for name := range inputs {
		p.Inputs = append(p.Inputs, name)
	}
	sort.Strings(p.Inputs)
	return g.Add(id, "test-node", p, inputs)
}

func objectPath(t testing.TB, s *artifacts.Store, d artifacts.Digest) string {
	t.Helper()
	p, err := s.Path(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Chmod(path, 0o444)
}

func nodeResult(t testing.TB, res *engine.Result, id string) engine.NodeResult {
	t.Helper()
	for _, n := range res.Nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("no node %q in result", id)
	return engine.NodeResult{}
}

func quarantined(t testing.TB, s *artifacts.Store) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Dir(), "quarantine"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return len(ents)
}
