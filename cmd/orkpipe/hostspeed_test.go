package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/hostspeed"
)

// TestHostSpeedsMeasured: with ORKPIPE_HOST_SPEEDS unset, the first plan in a cache measures this
// host's speeds, keeps them in the cache's history and estimates at them (the plan's line and
// --json's host_speeds say so); the next plan takes them from the file without measuring; "reference"
// plans at the reference host's; any other value is a usage error naming the variable.
func TestHostSpeedsMeasured(t *testing.T) {
	dir := t.TempDir()
	recipe, _, _ := tinyRecipe(t, dir)
	cache := filepath.Join(dir, "cache")
	t.Setenv(hostSpeedsEnv, "")
	plan := func(json bool) (string, string) {
		t.Helper()
		args := []string{"--cache", cache, "--mem", "2GiB", "-v", "plan", recipe}
		if json {
			args = append([]string{"--json"}, args...)
		}
		stdout, stderr, code := demoCLI(t, args...)
		if code != 0 {
			t.Fatalf("plan: exit %d: %s", code, stderr)
		}
		return stdout, stderr
	}
	out, errOut := plan(false)
	if !strings.Contains(errOut, "measured this host's kernel speeds") {
		t.Errorf("first plan in a cache: no measurement logged:\n%s", errOut)
	}
	if !strings.Contains(out, "the stages' cost model at this host's measured speed, ") {
		t.Errorf("first plan: the estimate does not say it is at this host's speed:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(cache, "history", "_hosts"))
	if err != nil {
		t.Fatal(err)
	}
	var kept struct {
		Hosts []struct {
			Host   string           `json:"host"`
			Speeds hostspeed.Speeds `json:"speeds"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(b, &kept); err != nil || len(kept.Hosts) != 1 || kept.Hosts[0].Host != hostspeed.Host() {
		t.Fatalf("the cache's host speeds: %v, %s", err, b)
	}
	out, errOut = plan(true)
	if strings.Contains(errOut, "measured this host's") {
		t.Errorf("second plan measured again:\n%s", errOut)
	}
	var planned struct {
		HostSpeeds *hostspeed.Speeds `json:"host_speeds"`
	}
	if err := json.Unmarshal([]byte(out), &planned); err != nil || planned.HostSpeeds == nil || *planned.HostSpeeds != kept.Hosts[0].Speeds {
		t.Errorf("plan --json: host_speeds %+v, %v; want the kept %+v", planned.HostSpeeds, err, kept.Hosts[0].Speeds)
	}

	t.Setenv(hostSpeedsEnv, "reference")
	if out, _ := plan(true); !strings.Contains(out, `"host_speeds":{"forward":1,"hessian":1,"dgemm":1,"intmatmul":1,"scalar":1}`) {
		t.Errorf("plan --json with %s=reference: %s", hostSpeedsEnv, out)
	}
	t.Setenv(hostSpeedsEnv, "fast")
	if _, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "plan", recipe); code != 2 || !strings.Contains(stderr, hostSpeedsEnv+`="fast"`) {
		t.Errorf("plan with %s=fast: exit %d, %s; want a usage error naming it", hostSpeedsEnv, code, stderr)
	}
}
