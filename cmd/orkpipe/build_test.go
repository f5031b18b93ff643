package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orkpipe/pipelines/progress"
	"orkpipe/stages/reporthtml"
)

// TestBuildCommand builds a tiny synthetic recipe through the CLI with --json: the summary line
// names the outputs by role, the files exist read-only, a second run executes nothing (served
// from the build memo without planning) and --plan reports every node cached; a changed source
// file or --set runs what depends on it; a bad recipe is a usage error (exit 2).
func TestBuildCommand(t *testing.T) {
	dir := t.TempDir()
	recipe, corpus, corpusText := tinyRecipe(t, dir)
	cache, out := filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	args := []string{"--cache", cache, "--mem", "2GiB", "-j", "2", "--json", "build", recipe, "-o", out}
	stdout, stderr, code := demoCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, sum := demoEvents(t, stdout)
	outs, _ := sum["outputs"].(map[string]any)
	for role, file := range map[string]string{"pack": "clitiny.orkpack", "stub": "clitiny.orkpack.gguf", "report": "report.json", "report-html": "report.html", "provenance": "provenance.json"} {
		if outs[role] != filepath.Join(out, file) {
			t.Errorf("summary outputs.%s = %v, want %s", role, outs[role], filepath.Join(out, file))
		}
	}
	var prov map[string]any
	b, _ := os.ReadFile(filepath.Join(out, "provenance.json"))
	if err := json.Unmarshal(b, &prov); err != nil || prov["_type"] != "https://in-toto.io/Statement/v1" || prov["predicateType"] != "https://slsa.dev/provenance/v1" {
		t.Errorf("provenance: %v %v", err, prov["_type"])
	}
	// The timeline of the run is beside the outputs (not one of them), and shows the executed nodes.
	page, err := os.ReadFile(filepath.Join(out, reporthtml.TimelineFile))
	if err != nil || reporthtml.Check(page) != nil || !strings.Contains(string(page), fmt.Sprintf("%v nodes executed", sum["executed"])) {
		t.Errorf("timeline of the first run: %v", err)
	}
	memo := filepath.Join(cache, "history", "clitiny", "memo")
	memoBefore, err := os.Stat(memo)
	if err != nil {
		t.Fatalf("no build memo after the first run: %v", err)
	}
	stdout, stderr, code = demoCLI(t, append([]string{"-v"}, args...)...)
	if _, sum := demoEvents(t, stdout); code != 0 || sum["executed"].(float64) != 0 {
		t.Errorf("second run: exit %d, summary %v", code, sum)
	}
	if !strings.Contains(stderr, "without planning") {
		t.Errorf("second run was not served from the memo without planning:\n%s", stderr)
	}
	// The second run was answered from the memo (a planned build would have written a new one).
	if fi, err := os.Stat(memo); err != nil || !os.SameFile(fi, memoBefore) {
		t.Errorf("second run did not use the build memo (%v)", err)
	}
	if page, err := os.ReadFile(filepath.Join(out, reporthtml.TimelineFile)); err != nil || !strings.Contains(string(page), "every output came from the cache") {
		t.Errorf("timeline of the second run (all cached): %v", err)
	}
	stdout, _, code = demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", "--plan", recipe)
	if code != 0 || !strings.Contains(stdout, "nodes, ") {
		t.Fatalf("--plan: exit %d: %s", code, stdout)
	}
	var total, cached int
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(line, "clitiny: ") {
			if _, err := fmtSscanf(line, &total, &cached); err != nil {
				t.Fatal(err)
			}
		}
	}
	if total == 0 || cached != total {
		t.Errorf("--plan: %d of %d nodes cached:\n%s", cached, total, stdout)
	}
	// build --plan prints what plan prints (the same table, DEPS included, and totals).
	if planOut, _, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "plan", recipe); code != 0 || planOut != stdout || !strings.Contains(stdout, "DEPS") {
		t.Errorf("build --plan and plan differ (plan exit %d):\n%s\n---\n%s", code, stdout, planOut)
	}
	// A source file is not part of the plan key but checked against the memo's digest: the
	// corpus rewritten, the nodes that read it run again.
	time.Sleep(20 * time.Millisecond) // another mtime
	if err := os.WriteFile(corpus, append(corpusText, "\nOne more line of corpus.\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = demoCLI(t, append([]string{"-v"}, args...)...)
	if _, sum := demoEvents(t, stdout); code != 0 || sum["executed"].(float64) == 0 || strings.Contains(stderr, "without planning") {
		t.Errorf("run after the corpus changed: exit %d, summary %v: %s", code, sum, stderr)
	}
	// A --set is part of what the memo is keyed by: the screen it changes runs again.
	stdout, stderr, code = demoCLI(t, append(args, "--set", "screen.ctx=16")...)
	if _, sum := demoEvents(t, stdout); code != 0 || sum["executed"].(float64) == 0 {
		t.Errorf("run with --set screen.ctx=16: exit %d, summary %v: %s", code, sum, stderr)
	}
	_, stderr, code = demoCLI(t, "--cache", cache, "build", recipe, "--set", "schemes.0.metod=rtn")
	if code != 2 || !strings.Contains(stderr, "metod") {
		t.Errorf("typo override: exit %d: %s", code, stderr)
	}
}

func fmtSscanf(line string, total, cached *int) (int, error) {
	return fmt.Sscanf(line, "clitiny: %d nodes, %d cached", total, cached)
}

// tinyRecipe writes dir/r.yaml, the recipe of target clitiny (a one-block synthetic model, GPTQ W4A8,
// a screen), and its calibration corpus dir/corpus.txt, whose text it returns.
func tinyRecipe(t *testing.T, dir string) (recipe, corpus string, corpusText []byte) {
	t.Helper()
	corpusText, err := os.ReadFile("../../pipelines/recipes/demo-corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	corpus = filepath.Join(dir, "corpus.txt")
	if err := os.WriteFile(corpus, corpusText, 0o644); err != nil {
		t.Fatal(err)
	}
	eval, _ := filepath.Abs("../../pipelines/recipes/demo-eval.txt")
	recipe = filepath.Join(dir, "r.yaml")
	err = os.WriteFile(recipe, []byte(`name: clitiny
source:
  synth: {layers: 1, n_embd: 64, n_ff: 96, n_head: 4, vocab: 360, ctx: 64, type: F32, seed: 9}
calibration: {corpus: `+corpus+`, sequences: 2, ctx: 32}
schemes:
  - {match: 'blk\.\d+\..*\.weight', method: gptq, dtype: I4_ROT_A8, group: 32}
screen: {text: `+eval+`, ctx: 32}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return recipe, corpus, corpusText
}

// TestBuildKeepsCosts: a build keeps what each kind of node cost in the cache's history
// (progress.CostsFile) and the rates its modeled costs ran at (progress.RatesFile); plan estimates a
// build's time from the kinds' costs, and from the model for what they lack — at the reference
// host's speed before any build, at the measured rates after one —, and the next build of the
// target estimates its time left from them before its own nodes of each kind have run: every
// node_finished line with an estimate, none a lower bound. A damaged costs or rates file is named in
// a warning and replaced.
func TestBuildKeepsCosts(t *testing.T) {
	dir := t.TempDir()
	recipe, _, _ := tinyRecipe(t, dir)
	cache := filepath.Join(dir, "cache")
	costs := filepath.Join(cache, "history", "clitiny", "costs")
	build := func(seed int) (finished []map[string]any, stderr string) {
		t.Helper()
		stdout, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "-j", "2", "--json", "-v", "build", recipe,
			"-o", filepath.Join(dir, fmt.Sprint("out", seed)), "--set", fmt.Sprint("source.synth.seed=", seed))
		if code != 0 {
			t.Fatalf("build with seed %d: exit %d: %s", seed, code, stderr)
		}
		evs, sum := demoEvents(t, stdout)
		if sum["cached"].(float64) != 0 {
			t.Fatalf("build with seed %d: %v nodes cached, want every node run", seed, sum["cached"])
		}
		for _, ev := range evs {
			if ev["event"] == "node_finished" {
				finished = append(finished, ev)
			}
		}
		return finished, stderr
	}
	plan := func(seed int, json bool, sets ...string) string {
		t.Helper()
		args := []string{"--cache", cache, "--mem", "2GiB", "plan", recipe, "--set", fmt.Sprint("source.synth.seed=", seed)}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if json {
			args = append([]string{"--json"}, args...)
		}
		stdout, stderr, code := demoCLI(t, args...)
		if code != 0 {
			t.Fatalf("plan with seed %d: exit %d: %s", seed, code, stderr)
		}
		return stdout
	}
	if out := plan(1, false); !strings.Contains(out, "estimated time: ") ||
		!strings.Contains(out, " (the stages' cost model at the reference host's speed, no build in this cache having measured its rates)") {
		t.Errorf("plan before any build: no estimate by the cost model:\n%s", out)
	}
	first, _ := build(1)
	var planned struct {
		EstimateMS       *int64           `json:"estimate_ms"`
		EstimateLower    bool             `json:"estimate_lower"`
		EstimateStagesMS map[string]int64 `json:"estimate_stages_ms"`
	}
	if err := json.Unmarshal([]byte(plan(2, true)), &planned); err != nil || planned.EstimateMS == nil || planned.EstimateLower {
		t.Errorf("plan --json of an unbuilt seed after a build: %v, estimate_ms %v, estimate_lower %v; want a full estimate", err, planned.EstimateMS, planned.EstimateLower)
	} else {
		var sum int64
		for _, ms := range planned.EstimateStagesMS {
			sum += ms
		}
		if d := sum - *planned.EstimateMS; d < -int64(len(planned.EstimateStagesMS)) || d > 0 || planned.EstimateStagesMS["calibrate"] <= 0 {
			t.Errorf("plan --json: estimate_stages_ms %v sum to %d ms, estimate_ms %d; want the same, calibrate's included", planned.EstimateStagesMS, sum, *planned.EstimateMS)
		}
	}
	if out := plan(2, false); !strings.Contains(out, "estimated time: ") || !strings.Contains(out, " nodes not cached (the costs earlier builds of clitiny kept)") {
		t.Errorf("plan of an unbuilt seed after a build: no estimate:\n%s", out)
	}
	if out := plan(1, false); strings.Contains(out, "estimated time") {
		t.Errorf("plan of the build just made (every node cached): an estimate:\n%s", out)
	}
	// Costs are kept per model: another shape has none yet, and its nodes are modeled at the rates
	// the first build measured.
	if out := plan(1, false, "source.synth.n_ff=128"); !strings.Contains(out, "estimated time: ") ||
		!strings.Contains(out, " (the stages' cost model at the rates earlier builds in this cache measured)") {
		t.Errorf("plan of another model's build: no estimate at the measured rates:\n%s", out)
	}
	checkSecond := func(finished []map[string]any) {
		t.Helper()
		for _, ev := range finished[:len(finished)-1] { // the last has nothing left to estimate
			if _, ok := ev["left_ms"].(float64); !ok || ev["left_lower"] != nil {
				t.Errorf("node_finished %v: want left_ms and no lower bound", ev)
			}
		}
	}
	checkSecond(first) // the model's, from the start
	rates := filepath.Join(cache, "history", "_rates")
	if r, err := progress.ReadRates(rates); err != nil || len(r) == 0 {
		t.Errorf("rates after the first build: %v, %v", r, err)
	}
	// The costs are kept for the model's shape (its seed set to 0).
	var file struct {
		Sources []struct{ Source string } `json:"sources"`
	}
	if b, err := os.ReadFile(costs); err != nil || json.Unmarshal(b, &file) != nil || len(file.Sources) != 1 {
		t.Fatalf("costs file after the first build: %v, %+v", err, file)
	}
	source := file.Sources[0].Source
	if !strings.HasPrefix(source, `synth {"layers":1,"n_embd":64,"n_ff":96,`) || !strings.Contains(source, `"seed":0`) {
		t.Errorf("costs kept for source %q, want the synthetic model's shape with seed 0", source)
	}
	kinds, err := progress.ReadCosts(costs, "clitiny", source)
	if err != nil || len(kinds) == 0 {
		t.Fatalf("costs after the first build: %v, %v", kinds, err)
	}
	stages := map[string]bool{}
	for _, k := range kinds {
		stages[k.Stage] = true
	}
	for _, ev := range first {
		if !stages[ev["stage"].(string)] {
			t.Errorf("stage %v ran and has no cost in %s", ev["stage"], costs)
		}
	}
	second, _ := build(2)
	checkSecond(second)
	if err := os.WriteFile(costs, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rates, []byte(`{"version":2,"rates":[{"stage":"","share_ms":1,"cost_ms":1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr := build(3); !strings.Contains(stderr, costs) || !strings.Contains(stderr, "costs not read") ||
		!strings.Contains(stderr, rates) || !strings.Contains(stderr, "rates not read") {
		t.Errorf("a damaged costs and rates file: no warnings naming %s and %s:\n%s", costs, rates, stderr)
	}
	if r, err := progress.ReadRates(rates); err != nil || len(r) == 0 {
		t.Errorf("rates after the build that found them damaged: %v, %v", r, err)
	}
	if kinds, err := progress.ReadCosts(costs, "clitiny", source); err != nil || len(kinds) == 0 {
		t.Errorf("costs after the build that found them damaged: %v, %v", kinds, err)
	}
	fourth, _ := build(4)
	checkSecond(fourth)
}

// TestPlanScalesCalibrationCosts: calibrate's and propagate's costs are kept with the calibration
// tokens that measured them, the other stages' without; a plan with other calibration sizes scales
// those two stages' costs to its tokens (twice the sequences, twice their time) and no other's.
func TestPlanScalesCalibrationCosts(t *testing.T) {
	dir := t.TempDir()
	recipe, _, _ := tinyRecipe(t, dir) // 2 sequences of 32 tokens
	cache := filepath.Join(dir, "cache")
	if _, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", filepath.Join(dir, "out")); code != 0 {
		t.Fatalf("build: exit %d: %s", code, stderr)
	}
	path := filepath.Join(cache, "history", "clitiny", "costs")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	// Every kind a second a node, so that the estimates are exact.
	kinds := f["sources"].([]any)[0].(map[string]any)["kinds"].([]any)
	for _, k := range kinds {
		k := k.(map[string]any)
		tokens, _ := k["tokens"].(float64)
		if scaled := k["stage"] == "calibrate" || k["stage"] == "propagate"; scaled && tokens != 64 || !scaled && tokens != 0 {
			t.Errorf("kept kind %v %v: tokens %v, want 64 for calibrate and propagate, none for the others", k["stage"], k["kind"], k["tokens"])
		}
		k["mean_ms"] = 1000
	}
	if b, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	estimate := func(sequences int) (ms int64, scaled int64) {
		t.Helper()
		stdout, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "--json", "plan", recipe,
			"--set", "source.synth.seed=2", "--set", fmt.Sprint("calibration.sequences=", sequences))
		if code != 0 {
			t.Fatalf("plan: exit %d: %s", code, stderr)
		}
		var p planOutput
		if err := json.Unmarshal([]byte(stdout), &p); err != nil || p.EstimateMS == nil {
			t.Fatalf("plan --json: %v, estimate %v", err, p.EstimateMS)
		}
		for _, n := range p.Nodes {
			if n.Stage == "calibrate" || n.Stage == "propagate" {
				scaled++
			}
		}
		return *p.EstimateMS, scaled
	}
	two, n := estimate(2)
	four, _ := estimate(4)
	one, _ := estimate(1)
	if n == 0 || four-two != n*1000 || two-one != n*500 {
		t.Errorf("estimates with 1, 2, 4 sequences: %d, %d, %d ms; want the %d calibrate and propagate nodes' seconds scaled with the tokens", one, two, four, n)
	}
}
