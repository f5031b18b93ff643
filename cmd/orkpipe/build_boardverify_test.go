package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/ork/boardhost"
	"orkpipe/pipelines/verify/verifytest"
	"orkpipe/registry/regtest"
)

// TestBuildRequiresBoardVerification is issue 9's last item on real components: `build` the demo
// recipe, `push` it to a real registry (distribution, in-process), `verify REF --run --attest --sign`
// on the "board host" (here: a stand-in for llama-perplexity that logs each run), `describe` shows
// the verification, then `build` the same recipe requiring that verification (board_verify via
// --set): the verify-board node is served from the signed attestation (one node executed, by the
// attestation; every other node cached; the board command not run), a second build executes
// nothing, and a requirement with another host fingerprint fails naming the attestation and the
// difference, without running anything.
func TestBuildRequiresBoardVerification(t *testing.T) {
	bv := setupBoardVerification(t)
	cache, out, recipe, runs, fp := bv.cache, bv.out, bv.recipe, bv.runs, bv.fp
	require := bv.require()
	// Build 1 runs verify-board (served by the attestation), provenance (it records the recipe,
	// which now has board_verify) and report (it records the --set overrides); every other node is
	// cached. Build 2 runs nothing.
	for i, want := range []string{"provenance,report,verify-board", ""} {
		args := append([]string{"--cache", cache, "--json", "-v", "build", recipe, "-o", out, "--board-verify-plain-http"}, require...)
		stdout, stderr, code := demoCLI(t, args...)
		if code != 0 {
			t.Fatalf("build %d requiring the verification: exit %d\n%s", i+1, code, stderr)
		}
		evs, sum := demoEvents(t, stdout)
		var started []string
		for _, ev := range evs {
			if ev["event"] == "node_started" {
				started = append(started, ev["node"].(string))
			}
		}
		slices.Sort(started)
		if strings.Join(started, ",") != want || sum["executed"] != float64(len(started)) || sum["failed"] != 0.0 ||
			sum["cached"] != float64(countEvents(evs, "plan")-len(started)) {
			t.Errorf("build %d: executed %v, summary %v; want executed [%s] and every other node cached", i+1, started, sum, want)
		}
		t.Logf("build %d: %v executed, %v cached, nodes run: %v", i+1, sum["executed"], sum["cached"], started)
		outputs, _ := sum["outputs"].(map[string]any)
		if p, _ := outputs["board-verify"].(string); p != filepath.Join(out, "board-verify.json") {
			t.Errorf("build %d: board-verify output %q", i+1, p)
		}
		if i == 0 && !strings.Contains(stderr, "verify-board satisfied by attestation") {
			t.Errorf("build 1: stderr does not say the attestation satisfied verify-board:\n%s", stderr)
		}
	}
	if n := countRuns(t, runs); n != 1 {
		t.Fatalf("%d board runs after the builds, want 1 (the board command ran on the build host)", n)
	}
	b, err := os.ReadFile(filepath.Join(out, "board-verify.json"))
	if err != nil || !strings.Contains(string(b), fp) {
		t.Errorf("board-verify.json (%v) does not carry the attested fingerprint %s", err, fp)
	}

	// Another board host: nothing matches; the error names what was looked for and what was seen.
	other := artifacts.SumBytes([]byte("another board")).String()
	args := append([]string{"--cache", cache, "build", recipe, "-o", filepath.Join(t.TempDir(), "o2"), "--board-verify-plain-http"}, require...)
	args = append(args, "--set", "board_verify.fingerprint="+other)
	_, stderr, code := demoCLI(t, args...)
	if code != 1 || !strings.Contains(stderr, "no board verification of pack") || !strings.Contains(stderr, "fingerprint "+fp+", want "+other) || !strings.Contains(stderr, "attestation sha256:") {
		t.Fatalf("build requiring another fingerprint: exit %d, want 1 naming the attestation and the fingerprint difference\n%s", code, stderr)
	}
	t.Logf("build requiring another fingerprint: exit %d\n%s", code, stderr)
	if n := countRuns(t, runs); n != 1 {
		t.Fatalf("%d board runs after the failed build, want 1", n)
	}
}

// TestBuildRequiresBoardVerificationDagger: with --executor dagger (a real engine; skipped without
// one), a build requiring the board verification runs every other node in containers and serves
// verify-board from the attestation on the build host: pack and stub are the local build's bytes
// (the report too, but for its record of the --set overrides), the board command never runs, and the action records say where each node ran (verify-board here,
// the others in the engine's containers).
func TestBuildRequiresBoardVerificationDagger(t *testing.T) {
	bin := daggerEngine(t)
	bv := setupBoardVerification(t)
	cache, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	args := append([]string{"--cache", cache, "--json", "-v", "build", bv.recipe, "-o", out, "--board-verify-plain-http",
		"--executor", "dagger", "--orkpipe-binary", bin}, bv.require()...)
	stdout, stderr, code := demoCLI(t, args...)
	if code != 0 {
		t.Fatalf("build requiring the verification on the Dagger engine: exit %d\n%s", code, stderr)
	}
	evs, sum := demoEvents(t, stdout)
	if sum["executed"] != float64(countEvents(evs, "plan")) || sum["failed"] != 0.0 {
		t.Fatalf("summary %v: want every node executed (a fresh cache)", sum)
	}
	if n := countRuns(t, bv.runs); n != 1 {
		t.Fatalf("%d board runs, want 1 (the board command ran on the build host)", n)
	}
	// The local build (setupBoardVerification's) made the same pack, stub and report, but for the
	// report's record of the --set overrides (that build required no verification).
	for _, f := range []string{"demo.orkpack", "demo.orkpack.gguf", "report.json"} {
		a, err1 := os.ReadFile(filepath.Join(bv.out, f))
		b, err2 := os.ReadFile(filepath.Join(out, f))
		if f == "report.json" {
			a, b = withoutOverrides(t, a), withoutOverrides(t, b)
		}
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: the Dagger build's differs from the local build's (%v, %v)", f, err1, err2)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "board-verify.json")); err != nil || !strings.Contains(string(b), bv.fp) {
		t.Errorf("board-verify.json (%v) does not carry the attested fingerprint %s", err, bv.fp)
	}
	store, err := artifacts.OpenStore(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	host, _ := os.Hostname()
	remote := 0
	for _, ev := range evs {
		if ev["event"] != "node_started" {
			continue
		}
		key, err := artifacts.ParseDigest(ev["key"].(string))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := store.GetAction(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev["node"] == "verify-board" && rec.Provenance.Host != host:
			t.Errorf("verify-board recorded as run on %q, want this host %q", rec.Provenance.Host, host)
		case ev["node"] != "verify-board" && rec.Provenance.Host == host:
			t.Errorf("node %s recorded as run on this host, want a container", ev["node"])
		case ev["node"] != "verify-board":
			remote++
		}
	}
	t.Logf("%d nodes ran in containers, verify-board on %s", remote, host)
}

// withoutOverrides returns report.json b without provenance.overrides, re-encoded.
func withoutOverrides(t *testing.T, b []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	prov, _ := m["provenance"].(map[string]any)
	if prov == nil {
		t.Fatalf("report.json has no provenance")
	}
	delete(prov, "overrides")
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// boardVerification is a demo build pushed to a real registry and verified on a stand-in board host
// whose signed attestation is attached to it: what a build requiring it needs.
type boardVerification struct {
	cache, out, recipe, ref string // the build's cache and output directory, its recipe, the pushed artifact
	command, fp, prog, key  string // the run command, the board host's fingerprint and run program, the board's key
	runs                    string // the stand-in runtime's log: one line a run
}

// require returns the --set overrides that require the verification.
func (bv boardVerification) require() []string {
	return []string{"--set", "board_verify.ref=" + bv.ref, "--set", "board_verify.command=" + bv.command,
		"--set", "board_verify.fingerprint=" + bv.fp, "--set", "board_verify.program=" + bv.prog, "--set", "board_verify.trust=" + bv.key + ".pub"}
}

// setupBoardVerification builds the demo, pushes it, verifies it with a run on the "board host" and
// attests the report, signed; describe shows the verification.
func setupBoardVerification(t *testing.T) boardVerification {
	t.Helper()
	cache, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	recipe := filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml")
	text, err := filepath.Abs(filepath.Join("..", "..", "pipelines", "recipes", "demo-stories-eval.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := demoCLI(t, "--cache", cache, "build", recipe, "-o", out); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, stderr)
	}
	reg := regtest.Start(t, nil)
	ref := reg.Ref("packs/demo", "v1")
	if _, stderr, code := demoCLI(t, "--cache", t.TempDir(), "push", out, ref, "--plain-http"); code != 0 {
		t.Fatalf("push: exit %d\n%s", code, stderr)
	}

	// The board host: a stand-in runtime that records every run, so a run on the build host shows.
	runs := filepath.Join(t.TempDir(), "runs.log")
	script := filepath.Join(t.TempDir(), "board-runtime.sh")
	body := fmt.Sprintf("#!/bin/sh\necho run >> '%s'\nexec '%s' \"$@\"\n", runs, verifytest.StandIn(t, "good"))
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	command := "'" + script + "' -m {stub} --ork-pack {pack} -f {text}"
	boardKey := filepath.Join(t.TempDir(), "board.key")
	if _, stderr, code := demoCLI(t, "key", "generate", "-o", boardKey); code != 0 {
		t.Fatalf("key generate: exit %d\n%s", code, stderr)
	}
	report := filepath.Join(t.TempDir(), "report.json")
	if _, stderr, code := demoCLI(t, "--cache", t.TempDir(), "verify", ref, "--plain-http", "-o", filepath.Join(t.TempDir(), "pulled"),
		"--run", command, "--text", text, "--report", report, "--attest", ref, "--sign", boardKey); code != 0 {
		t.Fatalf("verify --attest: exit %d\n%s", code, stderr)
	}
	if n := countRuns(t, runs); n != 1 {
		t.Fatalf("%d board runs after verify, want 1", n)
	}
	rep, err := boardhost.ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	// The build side reads what to require from describe (the digests the report carries).
	stdout, stderr, code := demoCLI(t, "--json", "describe", ref, "--plain-http", "--trust", boardKey+".pub")
	var desc struct {
		Verifications []struct {
			Attestation, Host, Board, Fingerprint, Program, Command string
			OK                                                      bool
			TrustedBy                                               []string `json:"trusted_by"`
		} `json:"verifications"`
	}
	if err := json.Unmarshal([]byte(stdout), &desc); code != 0 || err != nil || len(desc.Verifications) != 1 {
		t.Fatalf("describe --json: exit %d (%v), want one verification\n%s\n%s", code, err, stdout, stderr)
	}
	v := desc.Verifications[0]
	if !v.OK || v.Fingerprint != rep.Fingerprint.Digest() || v.Program != rep.Run.Program.Digest || v.Command != command || v.Board != "rk3588" {
		t.Fatalf("described verification %+v, want the report's (fingerprint %s, program %s)", v, rep.Fingerprint.Digest(), rep.Run.Program.Digest)
	}
	t.Logf("describe: attestation %s host %q board %s fingerprint %s program %s trusted_by %v", v.Attestation, v.Host, v.Board, v.Fingerprint, v.Program, v.TrustedBy)
	fp, prog := v.Fingerprint, v.Program
	stdout, stderr, code = demoCLI(t, "describe", ref, "--plain-http", "--trust", boardKey+".pub")
	if code != 0 || !strings.Contains(stdout, "board verifications:") || !strings.Contains(stdout, "fingerprint "+fp) || !strings.Contains(stdout, "program "+prog) {
		t.Fatalf("describe: exit %d, want the verification listed\n%s\n%s", code, stdout, stderr)
	}
	return boardVerification{cache: cache, out: out, recipe: recipe, ref: ref, command: command, fp: fp, prog: prog, key: boardKey, runs: runs}
}

func countRuns(t *testing.T, log string) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

// The board_verify transport flags without a requirement, and a trust key that cannot be read, are
// usage errors naming the flag or the field, before anything is planned or run.
func TestBuildBoardVerifyUsage(t *testing.T) {
	recipe := filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml")
	_, stderr, code := demoCLI(t, "--cache", t.TempDir(), "build", recipe, "--plan", "--board-verify-plain-http")
	if code != 2 || !strings.Contains(stderr, "--board-verify-plain-http") {
		t.Errorf("--board-verify-plain-http without board_verify: exit %d\n%s", code, stderr)
	}
	d := artifacts.SumBytes([]byte("x")).String()
	missing := filepath.Join(t.TempDir(), "missing.pub")
	_, stderr, code = demoCLI(t, "--cache", t.TempDir(), "build", recipe, "--plan", "--set", "board_verify.ref=localhost:1/p/d:v1",
		"--set", "board_verify.command=rt {pack}", "--set", "board_verify.fingerprint="+d, "--set", "board_verify.program="+d,
		"--set", "board_verify.trust="+missing)
	if code != 2 || !strings.Contains(stderr, "board_verify.trust") || !strings.Contains(stderr, missing) {
		t.Errorf("unreadable trust key: exit %d\n%s", code, stderr)
	}
}
