package main

import (
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
	if err != nil || !strings.Contains(out, "demo: 39 nodes, 0 cached") {
		t.Fatalf("plan before building: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "--cache", cache, "build", demo, "-o", filepath.Join(t.TempDir(), "out")); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err = runCLI(t, "--cache", cache, "plan", demo)
	if err != nil || !strings.Contains(out, "demo: 39 nodes, 39 cached") {
		t.Fatalf("plan after building: %v\n%s", err, out)
	}
	// A changed knob: plan shows what is no longer cached without running anything.
	out, err = runCLI(t, "--cache", cache, "plan", demo, "--set", "schemes.0.group=64")
	if err != nil || strings.Contains(out, "39 cached") || !strings.Contains(out, "demo: 39 nodes") {
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
