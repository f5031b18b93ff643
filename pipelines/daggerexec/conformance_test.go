package daggerexec_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/daggerexec"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/engine/executortest"
)

// engineHost returns ORKPIPE_DAGGER_ENGINE or skips the test, saying how to run it.
func engineHost(t *testing.T) string {
	h := os.Getenv("ORKPIPE_DAGGER_ENGINE")
	if h == "" {
		testfiles.SkipOptional(t, "ORKPIPE_DAGGER_ENGINE is not set: the Dagger executor's conformance run needs a running Dagger engine "+
			"%s, e.g. ORKPIPE_DAGGER_ENGINE=unix:///run/dagger/engine.sock (or tcp://HOST:PORT, "+
			"kube-pod://POD?namespace=NS) with %s=/path/to/dagger; see docs/dagger.md, "+
			"\"Testing against an engine\". The local executor's run is TestLocalConforms in package executortest", daggerexec.EngineVersion, daggerexec.EnvCLIBin)
	}
	return h
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// containerBinary builds the static linux/amd64 orkpipe once per test process.
func containerBinary(t *testing.T) string {
	binOnce.Do(func() {
		ctx := context.Background()
		root, err := daggerexec.ModuleRoot(ctx, ".")
		if err != nil {
			binErr = err
			return
		}
		dir, err := os.MkdirTemp("", "orkpipe-dagger-test-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "orkpipe-linux-amd64")
		binErr = daggerexec.BuildBinary(ctx, root, binPath)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func daggerFactory(host string) executortest.Factory {
	return func(t *testing.T, store *artifacts.Store, beforeIngest func(string) error) engine.Executor {
		opts := []daggerexec.Option{daggerexec.WithBinary(containerBinary(t)), daggerexec.WithRunnerHost(host),
			daggerexec.WithConnectTimeout(5 * time.Minute)}
		if beforeIngest != nil {
			opts = append(opts, daggerexec.WithBeforeIngest(beforeIngest))
		}
		x, err := daggerexec.New(context.Background(), store, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		return x
	}
}

func TestDaggerConforms(t *testing.T) {
	executortest.Run(t, daggerFactory(engineHost(t)))
}

// TestDaggerMatchesLocal runs the same nodes through both executors and requires identical
// output digests.
func TestDaggerMatchesLocal(t *testing.T) {
	host := engineHost(t)
	local := executortest.Outputs(t, func(t *testing.T, store *artifacts.Store, _ func(string) error) engine.Executor {
		return engine.Local{Store: store}
	})
	remote := executortest.Outputs(t, daggerFactory(host))
	for name, want := range local {
		if got := remote[name]; !slices.Equal(got, want) {
			t.Errorf("node %s: dagger %v, local %v", name, got, want)
		}
	}
}

// TestDaggerCacheAcrossStores: the engine's cache is a second level for any store. The suite's
// nodes run through one executor and store, then through another executor (a new session) on an
// empty store, with the binary and every source file at other paths (other names too): the
// engine answers every node from its cache (the result records are those of the first run), and
// the outputs are the same.
func TestDaggerCacheAcrossStores(t *testing.T) {
	host := engineHost(t)
	bin := filepath.Join(t.TempDir(), "another-name")
	b, err := os.ReadFile(containerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(binary string) (*daggerexec.Executor, map[string][]artifacts.NamedObject, map[string]time.Time) {
		x, err := daggerexec.New(ctx, executortest.OpenStore(t), daggerexec.WithBinary(binary), daggerexec.WithRunnerHost(host),
			daggerexec.WithConnectTimeout(5*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		outs, starts := map[string][]artifacts.NamedObject{}, map[string]time.Time{}
		for _, n := range executortest.Nodes(t) { // new source files at new paths each call
			o, prov, err := x.ExecuteProvenance(ctx, n.Req)
			if err != nil {
				t.Fatalf("node %s: %v", n.Name, err)
			}
			outs[n.Name], starts[n.Name] = o, prov.Start
		}
		return x, outs, starts
	}
	_, outs1, starts1 := run(containerBinary(t))
	x2, outs2, starts2 := run(bin)
	for name, want := range outs1 {
		if !slices.Equal(outs2[name], want) {
			t.Errorf("node %s: second store %v, first %v", name, outs2[name], want)
		}
		if !starts2[name].Equal(starts1[name]) {
			t.Errorf("node %s ran again on the engine (started %s, first run %s): the engine's cache did not answer", name, starts2[name], starts1[name])
		}
	}
	if st := x2.Stats(); st.Ran != 0 || st.Cached != len(outs1) {
		t.Errorf("second store: %+v, want all %d nodes from the engine's cache", st, len(outs1))
	}
}

// TestDaggerPackMatchesLocal runs the real pack build (executortest.PackRecipe: stories260K,
// W4A8 GPTQ; tokenize, calibrate, finalize, tile, write-orkpack, emit-stub, screen,
// verify-local, report, provenance) through the engine and in process, and requires every
// node's outputs byte-identical and every output as sparse (executortest.ComparePack). Then it
// builds again into an empty store through another session of the same engine: the engine's
// cache answers every node, and the outputs are again the same. It logs the bytes sent to the
// engine by each build; with ORKPIPE_LONG_TESTS=1 a third build sends every input whole (holes as
// zeros, no tar forms) for comparison.
func TestDaggerPackMatchesLocal(t *testing.T) {
	host, sent := countingEngine(t, engineHost(t))
	var mark int64
	logSent := func(what string) {
		if sent != nil {
			n := sent.Load()
			t.Logf("%s: %d bytes sent to the engine", what, n-mark)
			mark = n
		}
	}
	executors := map[*artifacts.Store]*daggerexec.Executor{}
	newX := func(t *testing.T, store *artifacts.Store, opts ...daggerexec.Option) engine.Executor {
		opts = append([]daggerexec.Option{daggerexec.WithBinary(containerBinary(t)),
			daggerexec.WithRunnerHost(host), daggerexec.WithConnectTimeout(5 * time.Minute)}, opts...)
		x, err := daggerexec.New(context.Background(), store, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		executors[store] = x
		return x
	}
	factory := func(t *testing.T, store *artifacts.Store, _ func(string) error) engine.Executor {
		return newX(t, store)
	}
	_, first := executortest.Pack(t, factory)
	for s, x := range executors {
		t.Logf("first build: %+v", x.Stats())
		delete(executors, s)
	}
	logSent("first build")
	store, second := executortest.PackBuild(t, func(s *artifacts.Store) engine.Executor { return newX(t, s) })
	st := executors[store].Stats()
	t.Logf("second build into an empty store: %d nodes, %d executed (by orkpipe's count) in %s; engine: %+v",
		len(second.Nodes), second.Executed, second.Duration, st)
	logSent("second build")
	if st.Ran != 0 || st.Cached != second.Executions {
		t.Errorf("second build: the engine ran %d nodes and answered %d from its cache, want all %d from its cache", st.Ran, st.Cached, second.Executions)
	}
	if !maps.Equal(second.Exports, first.Exports) {
		t.Errorf("second build's exports %v, first %v", second.Exports, first.Exports)
	}
	if testfiles.LongTests() { // the baseline: inputs with holes sent whole
		store, whole := executortest.PackBuild(t, func(s *artifacts.Store) engine.Executor { return newX(t, s, daggerexec.WithWholeInputs()) })
		t.Logf("build with every input sent whole, into an empty store: engine: %+v", executors[store].Stats())
		logSent("build with every input sent whole")
		if !maps.Equal(whole.Exports, first.Exports) {
			t.Errorf("exports with every input sent whole %v, first build %v", whole.Exports, first.Exports)
		}
	}
}
