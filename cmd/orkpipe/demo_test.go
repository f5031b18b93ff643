package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/pipelines/progress"
)

// run executes the CLI in-process and returns stdout, stderr and the exit code.
func demoCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx := context.Background()
	cmd := newRootCommand(newGlobalOptions(&stdout, &stderr))
	cmd.SetArgs(args)
	code := exitCode(ctx, cmd.ExecuteContext(ctx), &stderr)
	return stdout.String(), stderr.String(), code
}

// events parses JSON Lines output and checks the event contract of docs/cli.md.
func demoEvents(t *testing.T, out string) ([]map[string]any, map[string]any) {
	t.Helper()
	valid := map[string]bool{"plan": true, "node_cached": true, "node_started": true, "node_finished": true, "node_failed": true, "summary": true}
	var evs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		name, _ := ev["event"].(string)
		if !valid[name] {
			t.Fatalf("line %q: event %q is not one of the documented events", sc.Text(), name)
		}
		if name != "summary" {
			if _, ok := ev["node"].(string); !ok {
				t.Errorf("event %s without a node: %s", name, sc.Text())
			}
			if key, ok := ev["key"].(string); !ok || (name != "plan" && !strings.HasPrefix(key, "blake3:")) {
				t.Errorf("event %s without a key: %s", name, sc.Text())
			}
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	last := evs[len(evs)-1]
	if last["event"] != "summary" {
		t.Fatalf("last event is %v, want summary", last["event"])
	}
	for _, ev := range evs[:len(evs)-1] {
		if ev["event"] == "summary" {
			t.Fatal("summary before the last line")
		}
	}
	return evs, last
}

func countEvents(evs []map[string]any, name string) int {
	n := 0
	for _, ev := range evs {
		if ev["event"] == name {
			n++
		}
	}
	return n
}

func TestDemoTwiceJSON(t *testing.T) {
	cache, out := t.TempDir(), filepath.Join(t.TempDir(), "demo")
	for i, want := range []struct{ executed, cached float64 }{{5, 0}, {0, 5}} {
		stdout, stderr, code := demoCLI(t, "--cache", cache, "--json", "demo", "-o", out)
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i+1, code, stderr)
		}
		evs, sum := demoEvents(t, stdout)
		if sum["executed"] != want.executed || sum["cached"] != want.cached || sum["failed"] != 0.0 || sum["skipped"] != 0.0 {
			t.Errorf("run %d summary %v, want executed %v cached %v", i+1, sum, want.executed, want.cached)
		}
		if _, ok := sum["duration_ms"].(float64); !ok {
			t.Errorf("summary without duration_ms: %v", sum)
		}
		if countEvents(evs, "plan") != 5 || countEvents(evs, "node_finished") != int(want.executed) || countEvents(evs, "node_started") != int(want.executed) || countEvents(evs, "node_cached") != int(want.cached) {
			t.Errorf("run %d: %d plan, %d started, %d finished, %d cached events", i+1, countEvents(evs, "plan"), countEvents(evs, "node_started"), countEvents(evs, "node_finished"), countEvents(evs, "node_cached"))
		}
		outputs, _ := sum["outputs"].(map[string]any)
		for _, name := range []string{"demo.bin", "demo.json"} {
			p, _ := outputs[name].(string)
			st, err := os.Stat(p)
			if err != nil || st.Mode().Perm()&0o222 != 0 || p != filepath.Join(out, name) {
				t.Errorf("output %s -> %q: %v (mode %v), want a read-only file in %s", name, p, err, st, out)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "demo.bin"))
	if err != nil || len(b) != 2<<20 {
		t.Errorf("demo.bin: %d bytes (%v), want 2 MiB", len(b), err)
	}
	// The demo keeps its nodes' costs as build does, for plan's estimate and the next run's.
	costs, err := progress.ReadCosts(progress.CostsFile(filepath.Join(cache, "history"), "demo"), "demo", "")
	if err != nil || len(costs) != 5 {
		t.Errorf("the demo's costs: %v, %v; want its 5 kinds", costs, err)
	}
}

func TestDemoPlanExplain(t *testing.T) {
	cache, out := t.TempDir(), t.TempDir()
	stdout, _, code := demoCLI(t, "--cache", cache, "plan", "demo")
	if code != 0 || !strings.Contains(stdout, "pending") || !strings.Contains(stdout, "0 cached") {
		t.Errorf("plan before any build (exit %d):\n%s", code, stdout)
	}
	if _, stderr, code := demoCLI(t, "--cache", cache, "explain", "demo"); code != 2 || !strings.Contains(stderr, "no recorded build") {
		t.Errorf("explain before any build: exit %d, %s", code, stderr)
	}
	for _, seed := range []string{"1", "5"} {
		if _, stderr, code := demoCLI(t, "--cache", cache, "demo", "-o", out, "--seed", seed); code != 0 {
			t.Fatalf("demo --seed %s: exit %d\n%s", seed, code, stderr)
		}
	}
	stdout, _, code = demoCLI(t, "--cache", cache, "explain", "demo")
	if code != 0 || !strings.Contains(stdout, "params.seed: 1 -> 5") || !strings.Contains(stdout, "params.seed: 2 -> 6") {
		t.Errorf("explain (exit %d) does not name the seed change:\n%s", code, stdout)
	}
	stdout, _, code = demoCLI(t, "--cache", cache, "--json", "plan", "demo")
	var plan planOutput
	if err := json.Unmarshal([]byte(stdout), &plan); err != nil || code != 0 {
		t.Fatalf("plan --json: exit %d, %v\n%s", code, err, stdout)
	}
	// The default demo (seed 1) was built first: every node is cached with a known key.
	for _, n := range plan.Nodes {
		if !n.Cached || !strings.HasPrefix(n.Key, "blake3:") || n.Material == nil || n.Mem <= 0 {
			t.Errorf("plan node %+v: want cached, keyed, with material and memory", n)
		}
	}
	if len(plan.Nodes) != 5 {
		t.Errorf("plan has %d nodes, want 5", len(plan.Nodes))
	}
}

func TestDemoRefusesToClobber(t *testing.T) {
	cache, out := t.TempDir(), t.TempDir()
	foreign := filepath.Join(out, "demo.bin")
	if err := os.WriteFile(foreign, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := demoCLI(t, "--cache", cache, "demo", "-o", out)
	if code != 1 || strings.Count(stderr, "--force") != 1 || !strings.Contains(stderr, "refusing to overwrite "+foreign) {
		t.Errorf("demo over a foreign file: exit %d, %s (want the refusal naming the file and the --force hint once)", code, stderr)
	}
	if b, _ := os.ReadFile(foreign); string(b) != "mine" {
		t.Errorf("the foreign file was changed: %q", b)
	}
	if _, stderr, code := demoCLI(t, "--cache", cache, "demo", "-o", out, "--force"); code != 0 {
		t.Errorf("demo --force: exit %d, %s", code, stderr)
	}
}

func TestPlanOverBudgetNamesTheNode(t *testing.T) {
	_, stderr, code := demoCLI(t, "--cache", t.TempDir(), "--mem", "1MiB", "plan", "demo")
	if code != 2 || !strings.Contains(stderr, `"gen-a"`) || !strings.Contains(stderr, "budget") {
		t.Errorf("plan with a 1 MiB budget: exit %d, %s", code, stderr)
	}
	if _, stderr, code := demoCLI(t, "--cache", t.TempDir(), "plan", "no-such-target"); code != 2 {
		t.Errorf("plan of an unknown target: exit %d, %s", code, stderr)
	}
}

// TestDemoCheck: --check runs the cached demo graph again and reports every node reproduced
// (node_finished with checked, the summary's checked count); a stage name that is not a kind, or
// --check with --plan, is a usage error.
func TestDemoCheck(t *testing.T) {
	cache, out := t.TempDir(), filepath.Join(t.TempDir(), "demo")
	if _, stderr, code := demoCLI(t, "--cache", cache, "demo", "-o", out); code != 0 {
		t.Fatalf("demo: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := demoCLI(t, "--cache", cache, "--json", "demo", "-o", out, "--check")
	if code != 0 {
		t.Fatalf("demo --check: exit %d: %s", code, stderr)
	}
	evs, sum := demoEvents(t, stdout)
	checked := 0
	for _, ev := range evs {
		if ev["event"] == "node_finished" && ev["checked"] == true {
			checked++
		}
	}
	if checked != 5 || sum["checked"] != 5.0 || sum["executed"] != 5.0 || sum["cached"] != 0.0 {
		t.Errorf("demo --check: %d checked node_finished events, summary %v; want 5 and executed 5 (checked 5), cached 0", checked, sum)
	}
	stdout, _, code = demoCLI(t, "--cache", cache, "demo", "-o", out, "--check=demo-join")
	if code != 0 || !strings.Contains(stdout, "reproduced join") || !strings.Contains(stdout, "executed 1 (1 of them cached and reproduced), cached 4") {
		t.Errorf("demo --check=demo-join: exit %d, output %q; want join reproduced, the other 4 cached", code, stdout)
	}
	for _, args := range [][]string{{"demo", "-o", out, "--check=nosuch"}, {"demo", "-o", out, "--check=all,demo-join"},
		{"build", filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml"), "--plan", "--check"}} {
		if _, stderr, code := demoCLI(t, append([]string{"--cache", cache}, args...)...); code != exitUsage || !strings.Contains(stderr, "--check") {
			t.Errorf("%v: exit %d, stderr %q; want usage error naming --check", args, code, stderr)
		}
	}
}
