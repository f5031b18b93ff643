package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/boardhost"
	"orkpipe/pipelines/verify/verifytest"
	"orkpipe/registry"
	"orkpipe/registry/regtest"
)

// runVerifyCLI executes the root command and returns stdout, stderr and the exit status.
func runVerifyCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	opts := newGlobalOptions(&out, &errOut)
	root := newRootCommand(opts)
	root.SetArgs(args)
	ctx := context.Background()
	code := exitCode(ctx, root.ExecuteContext(ctx), &errOut)
	return out.String(), errOut.String(), code
}

// Acceptance 1 and 4 through the CLI: a good stand-in run gives a report with the parsed PPL and
// exit 0; two runs on this machine compare; a run with a different allow-listed environment
// (another machine state) is refused by compare, which names the difference.
func TestVerifyCLIRunAndCompare(t *testing.T) {
	dir := t.TempDir()
	verifytest.BuildDir(t, dir)
	text := testfiles.Path(t, "tinystories_sample.txt")
	run := "'" + verifytest.StandIn(t, "good") + "' -m {stub} --ork-pack {pack} -f {text}"
	reports := t.TempDir()
	a, b, c := filepath.Join(reports, "a.json"), filepath.Join(reports, "b.json"), filepath.Join(reports, "c.json")

	out, stderr, code := runVerifyCLI(t, "verify", dir, "--run", run, "--text", text, "--report", a)
	if code != 0 {
		t.Fatalf("verify: exit %d\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "2.6798") {
		t.Errorf("summary does not show the PPL:\n%s", out)
	}
	rep, err := boardhost.ReadReport(a)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Run == nil || rep.Run.Scores == nil || rep.Run.PPL != 2.6798 {
		t.Fatalf("report %+v, want ok with PPL 2.6798", rep.Run)
	}
	if _, stderr, code := runVerifyCLI(t, "verify", dir, "--run", run, "--text", text, "--report", b); code != 0 {
		t.Fatalf("second verify: exit %d: %s", code, stderr)
	}
	out, stderr, code = runVerifyCLI(t, "compare", a, b)
	if code != 0 || !strings.Contains(out, "comparable: same machine fingerprint") {
		t.Fatalf("compare of two same-machine runs: exit %d\n%s\n%s", code, out, stderr)
	}

	t.Setenv("ORK_NPU_CORES", "2")
	if _, stderr, code := runVerifyCLI(t, "verify", dir, "--run", run, "--text", text, "--report", c); code != 0 {
		t.Fatalf("third verify: exit %d: %s", code, stderr)
	}
	out, stderr, code = runVerifyCLI(t, "compare", a, c)
	if code != 1 || !strings.Contains(stderr, "not comparable") || !strings.Contains(stderr, "ORK_NPU_CORES") {
		t.Fatalf("compare across fingerprints: exit %d\n%s\n%s", code, out, stderr)
	}
	out, _, code = runVerifyCLI(t, "compare", "--cross-machine", a, c)
	if code != 0 || !strings.Contains(out, "NOT COMPARABLE") {
		t.Fatalf("compare --cross-machine: exit %d\n%s", code, out)
	}

	// --env-allow decides which variables are part of the machine: without ORK_* the two compare.
	d, e := filepath.Join(reports, "d.json"), filepath.Join(reports, "e.json")
	if _, stderr, code := runVerifyCLI(t, "verify", dir, "--run", run, "--text", text, "--report", d, "--env-allow", "GGML_*"); code != 0 {
		t.Fatalf("verify --env-allow: exit %d: %s", code, stderr)
	}
	t.Setenv("ORK_NPU_CORES", "3")
	if _, stderr, code := runVerifyCLI(t, "verify", dir, "--run", run, "--text", text, "--report", e, "--env-allow", "GGML_*"); code != 0 {
		t.Fatalf("verify --env-allow: exit %d: %s", code, stderr)
	}
	if out, stderr, code := runVerifyCLI(t, "compare", d, e); code != 0 {
		t.Fatalf("compare with ORK_* not allow-listed: exit %d\n%s\n%s", code, out, stderr)
	}
}

// A failed verification exits 1 and names the failed checks; --json carries "ok": false.
func TestVerifyCLIFailureExitStatus(t *testing.T) {
	dir := t.TempDir()
	verifytest.BuildDir(t, dir)
	stub := filepath.Join(dir, verifytest.Name+".orkpack.gguf")
	os.Chmod(stub, 0o644)
	f, err := os.OpenFile(stub, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("GGUF\x02"), 0) // version 3 -> 2: the header region no longer matches the build's
	f.Close()
	out, stderr, code := runVerifyCLI(t, "--json", "verify", dir)
	if code != 1 || !strings.Contains(stderr, "integrity") || !strings.Contains(stderr, "stub-header") {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	if !strings.Contains(out, `"ok":false`) {
		t.Errorf("--json output lacks \"ok\":false: %s", out)
	}
}

// A failing run shows the tail of its output in the summary and exits 1.
func TestVerifyCLIRunFailureTail(t *testing.T) {
	dir := t.TempDir()
	verifytest.BuildDir(t, dir)
	run := "'" + verifytest.StandIn(t, "fails") + "' -m {stub} --ork-pack {pack}"
	out, stderr, code := runVerifyCLI(t, "verify", dir, "--run", run)
	if code != 1 || !strings.Contains(stderr, "failed: run") || !strings.Contains(out, "  | main: unable to load model") || !strings.Contains(out, "exit status 1") {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
}

func TestVerifyCLIUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"verify"},
		{"verify", dir, "--text", "x.txt"},
		{"verify", dir, "--attest", "localhost:5000/x:y"},
		{"verify", dir, "--run", "llama-perplexity 'unterminated"},
		{"verify", "not a ref at all!"},
		{"verify", "out/stories"}, // a missing directory, never a Docker Hub repository
		{"verify", dir, "-o", dir},
		{"verify", dir, "--env-allow", "ORK_["},
	} {
		if _, stderr, code := runVerifyCLI(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, code, stderr)
		}
	}
}

// Acceptance 5 through the CLI, against a real registry: push a build, `verify REF` on the "board"
// (pull into -o, verify, run the stand-in, attest with --sign), then `describe` lists the signed
// board-verification attestation and `verify --list` shows which host verified it with which
// binaries.
func TestVerifyCLIRefAttestDescribe(t *testing.T) {
	reg := regtest.Start(t, nil)
	ref := reg.Ref("packs/stories", "v1")
	build := t.TempDir()
	verifytest.BuildDir(t, build)
	if _, stderr, code := runVerifyCLI(t, "--cache", t.TempDir(), "push", "--plain-http", build, ref); code != 0 {
		t.Fatalf("push: exit %d: %s", code, stderr)
	}
	keys := t.TempDir()
	key := filepath.Join(keys, "board.key")
	if _, stderr, code := runVerifyCLI(t, "key", "generate", "-o", key); code != 0 {
		t.Fatalf("key generate: exit %d: %s", code, stderr)
	}
	pulled := filepath.Join(t.TempDir(), "pulled")
	text := testfiles.Path(t, "tinystories_sample.txt")
	run := "'" + verifytest.StandIn(t, "good") + "' -m {stub} --ork-pack {pack} -f {text}"
	out, stderr, code := runVerifyCLI(t, "verify", "--plain-http", ref, "-o", pulled, "--run", run, "--text", text,
		"--attest", ref, "--sign", key)
	if code != 0 || !strings.Contains(out, "attested "+ref+" as sha256:") {
		t.Fatalf("verify REF --attest: exit %d\n%s\n%s", code, out, stderr)
	}
	att, _, _ := strings.Cut(out[strings.Index(out, "attested "+ref+" as ")+len("attested "+ref+" as "):], "\n")
	if _, err := os.Stat(filepath.Join(pulled, verifytest.Name+".orkpack")); err != nil {
		t.Fatalf("REF was not pulled into -o: %v", err)
	}
	out, stderr, code = runVerifyCLI(t, "describe", "--plain-http", "--trust", key+".pub", ref)
	if code != 0 || !strings.Contains(out, "https://orkpipe.dev/board-verify/v1") || !strings.Contains(out, "signed by trusted key") {
		t.Fatalf("describe: exit %d\n%s\n%s", code, out, stderr)
	}
	// The build side sees which board verified the pack, with which binaries.
	host, _ := os.Hostname()
	for _, want := range []string{"board verifications:", `board "rk3588" host "` + host + `": passed`, "fake-llama-perplexity-good.sh", "PPL 2.6798"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	list := func(when string) {
		t.Helper()
		out, stderr, code := runVerifyCLI(t, "verify", "--list", "--plain-http", "--trust", key+".pub", ref)
		for _, want := range []string{`board "rk3588" host "` + host + `": passed`, "fake-llama-perplexity-good.sh", "script-interpreter", "PPL 2.6798"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("verify --list %s: exit %d, output lacks %q:\n%s\n%s", when, code, want, out, stderr)
			}
		}
	}
	list("")

	// Listed after more attestations of other predicate types than are fetched (70 decoys before it
	// in the referrers index), the board verification is still found by verify --list and describe.
	priv, err := registry.LoadPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	plain := registry.WithPlainHTTP(reg.Host)
	d, err := registry.Describe(context.Background(), ref, plain)
	if err != nil {
		t.Fatal(err)
	}
	const decoys = 70
	verifytest.AttachDecoys(t, ref, decoys, plain, registry.WithSigner(priv))
	if n := reg.MoveReferrerLast(t, "packs/stories", d.Artifact.Digest.String(), att); n != decoys {
		t.Fatalf("%d referrers listed before the board verification %s, want %d", n, att, decoys)
	}
	list(fmt.Sprintf("after %d decoys", decoys))
	out, stderr, code = runVerifyCLI(t, "describe", "--plain-http", "--trust", key+".pub", ref)
	if code != 0 || !strings.Contains(out, `board "rk3588" host "`+host+`": passed`) {
		t.Errorf("describe after %d decoys: exit %d, no board verification:\n%s\n%s", decoys, code, out, stderr)
	}
}

// TestVerifyCLIUnlistedFiles: a file of DIR that provenance.json does not list fails no check, but
// verify names it (a warning line; "unlisted_files" in --json), so that nobody takes it for verified.
// orkpipe's own hidden files are not named.
func TestVerifyCLIUnlistedFiles(t *testing.T) {
	dir := t.TempDir()
	verifytest.BuildDir(t, dir)
	if err := os.WriteFile(filepath.Join(dir, ".orkpipe-timeline.html"), []byte("<html></html>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(want []string) {
		t.Helper()
		out, stderr, code := runVerifyCLI(t, "verify", dir)
		if code != 0 {
			t.Fatalf("verify: exit %d\n%s\n%s", code, out, stderr)
		}
		warned := strings.Contains(out, "warning:")
		if len(want) == 0 && warned {
			t.Errorf("verify warned with every file listed in provenance.json:\n%s", out)
		}
		if len(want) > 0 && !strings.Contains(out, "warning: 1 file(s) in "+dir+" not listed in provenance.json, not verified: "+strings.Join(want, ", ")+"\n") {
			t.Errorf("verify does not warn of %q:\n%s", want, out)
		}
		out, stderr, code = runVerifyCLI(t, "--json", "verify", dir)
		if code != 0 {
			t.Fatalf("verify --json: exit %d\n%s\n%s", code, out, stderr)
		}
		var got struct {
			Unlisted *[]string `json:"unlisted_files"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if got.Unlisted == nil || !slices.Equal(*got.Unlisted, want) {
			t.Errorf("verify --json: unlisted_files %v, want %q", got.Unlisted, want)
		}
	}
	check(nil)
	if err := os.WriteFile(filepath.Join(dir, "extra.bin"), []byte("not built by orkpipe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check([]string{"extra.bin"})
}
