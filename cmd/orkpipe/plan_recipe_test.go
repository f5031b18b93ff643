package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanAndExplainRecipe: plan and explain take a recipe file (and --set) like build does; after a
// build, plan reports every node cached and explain names what changed.
func TestPlanAndExplainRecipe(t *testing.T) {
	cache := t.TempDir()
	demo := filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml")
	out, err := runCLI(t, "--cache", cache, "plan", demo)
	if err != nil || !strings.Contains(out, "demo: 88 nodes, 0 cached") {
		t.Fatalf("plan before building: %v\n%s", err, out)
	}
	outDir := filepath.Join(t.TempDir(), "out")
	if out, err := runCLI(t, "--cache", cache, "build", demo, "-o", outDir); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// The demo is a real model: its float perplexity on the real evaluation text is that of a trained
	// model (a random one scores in the hundreds), and the pack's is no better than the float model's.
	var rep struct {
		Screen struct {
			PPL     float64 `json:"ppl"`
			BasePPL float64 `json:"base_ppl"`
			KLD     float64 `json:"kld_mean"`
		} `json:"screen"`
	}
	b, err := os.ReadFile(filepath.Join(outDir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if sc := rep.Screen; sc.BasePPL < 1 || sc.BasePPL > 20 || sc.PPL < sc.BasePPL || sc.KLD <= 0 {
		t.Errorf("demo screen: PPL %v, float PPL %v, mean KLD %v: want a trained model's float PPL and a pack PPL at least as high", sc.PPL, sc.BasePPL, sc.KLD)
	}
	out, err = runCLI(t, "--cache", cache, "plan", demo)
	if err != nil || !strings.Contains(out, "demo: 88 nodes, 88 cached") {
		t.Fatalf("plan after building: %v\n%s", err, out)
	}
	// A changed knob: plan shows what is no longer cached without running anything.
	out, err = runCLI(t, "--cache", cache, "plan", demo, "--set", "schemes.0.group=64")
	if err != nil || strings.Contains(out, "88 cached") || !strings.Contains(out, "demo: 88 nodes") {
		t.Fatalf("plan with an override: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "--cache", cache, "build", demo, "--set", "schemes.0.group=64", "-o", filepath.Join(t.TempDir(), "out")); err != nil {
		t.Fatalf("build with an override: %v", err)
	}
	out, err = runCLI(t, "--cache", cache, "explain", demo)
	if err != nil || !strings.Contains(out, "group") {
		t.Fatalf("explain after changing the group size: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "plan", "nosuch.yaml"); err == nil || !strings.Contains(err.Error(), "recipe file") {
		t.Errorf("plan of a missing recipe: %v", err)
	}
}
