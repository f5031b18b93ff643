package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/boardhost"
)

// compareCLI runs the CLI in-process and returns stdout, stderr and the exit status.
func compareCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCommand(newGlobalOptions(&out, &errb))
	root.SetArgs(args)
	ctx := context.Background()
	code := exitCode(ctx, root.ExecuteContext(ctx), &errb)
	return out.String(), errb.String(), code
}

// compareReport writes a verify report for one arm: this machine's real fingerprint and the real
// closure of /bin/ls as the run program; the run itself (a board runtime) is represented by its
// recorded scores. edit may change the fingerprint before the report is written.
func compareReport(t *testing.T, name string, ppl float64, textDigest string, edit func(*boardhost.Fingerprint)) string {
	t.Helper()
	ctx := context.Background()
	f, err := boardhost.Collect(ctx, boardhost.WithEnv([]string{"ORK_OFF=0"}))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(f)
	}
	prog, err := boardhost.ResolveProgram(ctx, "/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	pack := boardhost.FileDigest{Role: "pack", Path: "/packs/" + name + ".orkpack", Digest: "blake3:" + strings.Repeat(name[:1], 64), Size: 1}
	text := boardhost.FileDigest{Role: "text", Path: "/data/stories-generated.txt", Digest: textDigest, Size: 44666}
	r := &boardhost.Report{Inputs: []boardhost.FileDigest{pack, text}}
	r.SetFingerprint(f)
	r.SetRun(&boardhost.RunRecord{
		Command: "llama-perplexity -m {stub} -f {text}", Argv: []string{"/bin/ls"}, Program: prog,
		Scores: &boardhost.Scores{PPL: ppl, PPLErr: 0.03, PPLSource: boardhost.PPLFromFinalEstimate, Chunks: 39},
		Before: []boardhost.FileDigest{pack, text}, After: []boardhost.FileDigest{pack, text},
	}, nil)
	path := filepath.Join(t.TempDir(), name+".json")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCompareCommand(t *testing.T) {
	text := "blake3:" + strings.Repeat("7", 64)
	a := compareReport(t, "a", 2.4894, text, nil)
	b := compareReport(t, "b", 2.6798, text, nil)

	out, errOut, code := compareCLI(t, "compare", a, b)
	if code != 0 || !strings.Contains(out, "comparable: same machine fingerprint blake3:") || !strings.Contains(out, "+7.648%") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("same machine:\n%s", out)

	out, _, code = compareCLI(t, "--json", "compare", a, b)
	var c boardhost.Comparison
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || !c.Comparable || len(c.Metrics) != 1 || c.Metrics[0].RelDiff == nil {
		t.Fatalf("--json: exit %d: %s", code, out)
	}

	// Another machine (a kernel built on another day), and another text.
	otherKernel := compareReport(t, "c", 2.6798, text, func(f *boardhost.Fingerprint) {
		f.System.KernelVersion = "#2 SMP Mon Aug 11 10:12:01 UTC 2026"
	})
	out, errOut, code = compareCLI(t, "compare", a, otherKernel)
	if code != 1 || !strings.Contains(errOut, "not comparable") || !strings.Contains(errOut, "kernel.version") || strings.Contains(out, "+7.648%") {
		t.Fatalf("mismatched kernel: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("refused:\n%s", errOut)
	otherText := compareReport(t, "d", 2.6798, "blake3:"+strings.Repeat("8", 64), nil)
	if _, errOut, code = compareCLI(t, "compare", a, otherText); code != 1 || !strings.Contains(errOut, "text:") {
		t.Fatalf("mismatched text: exit %d: %s", code, errOut)
	}

	out, _, code = compareCLI(t, "compare", "--cross-machine", a, otherKernel)
	if code != 0 || !strings.Contains(out, "NOT COMPARABLE") || !strings.Contains(out, "kernel.version") || !strings.Contains(out, "+7.648%") {
		t.Fatalf("--cross-machine: exit %d\n%s", code, out)
	}
	t.Logf("cross-machine:\n%s", out)

	out, _, code = compareCLI(t, "--json", "compare", a, otherKernel)
	c = boardhost.Comparison{}
	if code != 1 || json.Unmarshal([]byte(out), &c) != nil || c.Comparable || len(c.Mismatches) != 1 || c.Mismatches[0].Part != "kernel.version" || c.Metrics != nil {
		t.Fatalf("--json refused: exit %d: %s", code, out)
	}
}

func TestCompareCommandErrors(t *testing.T) {
	text := "blake3:" + strings.Repeat("7", 64)
	a := compareReport(t, "a", 2.4894, text, nil)
	if _, errOut, code := compareCLI(t, "compare", a); code != 2 || !strings.Contains(errOut, "want 2 report files") {
		t.Errorf("one argument: exit %d: %s", code, errOut)
	}
	missing := filepath.Join(t.TempDir(), "missing.json")
	if _, errOut, code := compareCLI(t, "compare", a, missing); code != 1 || !strings.Contains(errOut, "missing.json") {
		t.Errorf("missing report: exit %d: %s", code, errOut)
	}
	// An edited report (the score's machine swapped by hand) fails verification on read.
	b, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	tampered := filepath.Join(t.TempDir(), "tampered.json")
	os.WriteFile(tampered, bytes.Replace(b, []byte(`"hostname": "`+host+`"`), []byte(`"hostname": "rk3588-board-1"`), 1), 0o644)
	if _, errOut, code := compareCLI(t, "compare", a, tampered); code != 1 || !strings.Contains(errOut, "fingerprint digest") {
		t.Errorf("tampered report: exit %d: %s", code, errOut)
	}
}
