package engine_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/engine"
)

// The cross-process tests re-execute this test binary as a helper that builds a graph against a
// shared cache directory (TestMain below).
const helperEnv = "ORKPIPE_ENGINE_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain builds the graph named by mode against the cache in ORKPIPE_TEST_CACHE.
func helperMain(mode string) int {
	s, err := artifacts.OpenStore(os.Getenv("ORKPIPE_TEST_CACHE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer s.Close()
	e, err := engine.New(s, engine.WithJobs(2), engine.WithMemoryBudget(1<<30))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	var g *engine.Graph
	switch mode {
	case "wide":
		g = wideGraph()
	case "blocking":
		g = blockingGraph()
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 3
	}
	p, err := e.Plan(g)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	res, err := e.Build(context.Background(), mode, p, engine.BuildOptions{OutDir: os.Getenv("ORKPIPE_TEST_OUT")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("executed=%d cached=%d\n", res.Executed, res.Cached)
	return 0
}

// wideGraph: 4 roots, 4 middle nodes, 1 join; each sleeps so that two builds overlap.
func wideGraph() *engine.Graph {
	g := engine.NewGraph()
	join := map[string]engine.Input{}
	for i := range 4 {
		r := node(g, fmt.Sprintf("root%d", i), testParams{SleepMS: 60, Size: 1000}, nil)
		m := node(g, fmt.Sprintf("mid%d", i), testParams{SleepMS: 60}, map[string]engine.Input{"in": r.Output("out")})
		join[fmt.Sprintf("in%d", i)] = m.Output("out")
	}
	j := node(g, "join", testParams{SleepMS: 30}, join)
	g.Export("join.bin", j.Output("out"))
	return g
}

// blockingGraph: first -> slow (blocks with ORKPIPE_TEST_BLOCK=1) -> last.
func blockingGraph() *engine.Graph {
	g := engine.NewGraph()
	a := node(g, "first", testParams{Size: 100}, nil)
	b := node(g, "slow", testParams{Block: true, Size: 1 << 20}, map[string]engine.Input{"in": a.Output("out")})
	c := node(g, "last", testParams{}, map[string]engine.Input{"in": b.Output("out")})
	g.Export("last.bin", c.Output("out"))
	return g
}

func helper(t *testing.T, mode, cache string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := testfiles.SelfCommand("-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + mode, "ORKPIPE_TEST_CACHE=" + cache}, env...)...)
	return cmd
}

// TestTwoProcessesExecuteEachNodeOnce: two processes build the same graph at once; every node
// runs exactly once between them, both succeed, and the store verifies clean.
func TestTwoProcessesExecuteEachNodeOnce(t *testing.T) {
	cache := t.TempDir()
	log := filepath.Join(t.TempDir(), "exec.log")
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for i := range 2 {
		cmd := helper(t, "wide", cache, "ORKPIPE_TEST_EXECLOG="+log, fmt.Sprintf("ORKPIPE_TEST_OUT=%s", filepath.Join(t.TempDir(), fmt.Sprint(i))))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
		t.Logf("helper %d: %s", i, strings.TrimSpace(outs[i].String()))
	}
	runs := readLog(t, log)
	var tags []string
	pids := map[string]bool{}
	for _, r := range runs {
		tags = append(tags, r[0])
		pids[r[1]] = true
	}
	sort.Strings(tags)
	want := "join,mid0,mid1,mid2,mid3,root0,root1,root2,root3"
	if got := strings.Join(tags, ","); got != want {
		t.Errorf("executions across both processes: %s\nwant each node once: %s", got, want)
	}
	t.Logf("%d executions by %d processes", len(runs), len(pids))
	s := openStore(t, cache)
	rep, err := s.VerifyAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Corrupt) != 0 {
		t.Errorf("VerifyAll: corrupt %+v", rep.Corrupt)
	}
}

func readLog(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, strings.Fields(sc.Text()))
	}
	return out
}

// TestKilledBuildRecovers: a helper is SIGKILLed while a node runs; the next build (in this
// process) completes, runs only the nodes that had not finished, and the store verifies clean.
func TestKilledBuildRecovers(t *testing.T) {
	cache := t.TempDir()
	marker := filepath.Join(t.TempDir(), "started")
	cmd := helper(t, "blocking", cache, "ORKPIPE_TEST_BLOCK=1", "ORKPIPE_TEST_MARKER="+marker)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("helper never reached the blocking node:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	partial, _ := os.ReadFile(marker) // the killed node's output directory
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("helper exited cleanly; want killed")
	}

	resetCounts()
	s := openStore(t, cache)
	if _, err := os.Stat(string(partial)); err == nil {
		t.Errorf("the killed node's scratch directory %s survived opening the store", partial)
	}
	e := newEngine(t, s)
	out2 := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := build(t, ctx, e, "blocking", blockingGraph(), engine.BuildOptions{OutDir: out2})
	if err != nil {
		t.Fatalf("build after the kill: %v", err)
	}
	if got := executedTags(); got != "last,slow" || res.Cached != 1 {
		t.Errorf("after the kill: executed %q, cached %d; want last,slow and 1 (first)", got, res.Cached)
	}
	rep, err := s.VerifyAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Corrupt) != 0 {
		t.Errorf("VerifyAll: corrupt %+v", rep.Corrupt)
	}
	b, err := os.ReadFile(filepath.Join(out2, "last.bin"))
	if err != nil || !strings.HasPrefix(string(b), "<first>") || !strings.Contains(string(b), "<slow>") || !strings.HasSuffix(string(b), "<last>") {
		t.Errorf("last.bin: %v, %d bytes, want <first>...<slow>...<last>", err, len(b))
	}
}
