package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

// cliChildEnv holds the JSON argument list of a CLI run in a child process: this test binary
// re-executed (TestMain), so that GODEBUG and GOMAXPROCS apply from its start, as they would to a
// build on another machine.
const cliChildEnv = "ORKPIPE_TEST_CLI_CHILD"

func TestMain(m *testing.M) {
	if raw := os.Getenv(cliChildEnv); raw != "" {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			os.Stderr.WriteString("bad " + cliChildEnv + ": " + err.Error() + "\n")
			os.Exit(2)
		}
		if v := os.Getenv(pushChunkEnv); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				os.Stderr.WriteString("bad " + pushChunkEnv + ": " + err.Error() + "\n")
				os.Exit(2)
			}
			pushChunkSize = n
		}
		ctx, stop := interruptible(os.Stderr) // as main's
		opts := newGlobalOptions(os.Stdout, os.Stderr)
		cmd := newRootCommand(opts)
		cmd.SetArgs(args)
		code := exitCode(ctx, cmd.ExecuteContext(ctx), os.Stderr)
		stop()
		os.Exit(code)
	}
	// The tests plan at the reference host's speeds (reproducible estimates, and no probe of the host
	// in each test's fresh cache); TestHostSpeedsMeasured measures.
	if _, ok := os.LookupEnv(hostSpeedsEnv); !ok {
		os.Setenv(hostSpeedsEnv, "reference")
	}
	os.Exit(m.Run())
}

// TestBuildReproducesOnOtherKernels: the pure-Go build's outputs follow from the node keys alone.
// Three recipes on the embedded stories260K (the demo's GPTQ pack; RTN with its clip search in
// 32-wide groups; w4a4-best: rotation seeds, activation clips, the scale refit) are built, then
// checked (`build --check`: every node run again and compared with its record) by a process with
// AVX-512 and AVX2 turned off and one core — another machine's kernels and scheduling. A kernel
// whose float results depend on the CPU, or a stage whose output depends on the core count, fails
// here by node name (when the CPU has neither feature, both runs take the same path and the test
// shows only the core count).
func TestBuildReproducesOnOtherKernels(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "-short: three builds twice, one of them without SIMD kernels")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	recipes := filepath.Join(root, "pipelines", "recipes")
	model := "source.model=" + filepath.Join(recipes, "stories260K.gguf")
	text := "screen.text=" + filepath.Join(recipes, "demo-stories-eval.txt")
	cal := []string{"--set", "calibration.corpus=" + filepath.Join(recipes, "demo-stories-calib.txt"),
		"--set", "calibration.sequences=4", "--set", "calibration.ctx=128"}
	builds := [][]string{
		{filepath.Join(recipes, "demo.yaml")},
		{filepath.Join(recipes, "w4a4-rtn.yaml"), "--set", model, "--set", text, "--set", "schemes.0.group=32"},
		append([]string{filepath.Join(recipes, "w4a4-best.yaml"), "--set", model, "--set", text, "--set", "screen.ctx=128"}, cal...),
	}
	cache := t.TempDir()
	child := func(env []string, args ...string) (string, string, int) {
		t.Helper()
		raw, err := json.Marshal(append([]string{"--cache", cache}, args...))
		if err != nil {
			t.Fatal(err)
		}
		cmd := testfiles.SelfCommand("-test.run=^$")
		cmd.Env = append(os.Environ(), append(env, cliChildEnv+"="+string(raw))...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	other := []string{"GODEBUG=cpu.avx512=off,cpu.avx512f=off,cpu.avx2=off", "GOMAXPROCS=1"}
	for i, b := range builds {
		out := filepath.Join(t.TempDir(), "out")
		if _, stderr, code := child(nil, append([]string{"build", "-o", out}, b...)...); code != 0 {
			t.Fatalf("build %s: exit %d: %s", filepath.Base(b[0]), code, stderr)
		}
		stdout, stderr, code := child(other, append([]string{"--json", "build", "-o", out + "-check", "--check", "--keep-going"}, b...)...)
		var sum struct {
			Executed, Checked, Cached, Failed, Skipped int
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
			t.Fatalf("build %d --check: last line %q: %v (exit %d, stderr %s)", i, lines[len(lines)-1], err, code, stderr)
		}
		if code != 0 || sum.Failed != 0 || sum.Checked != sum.Executed || sum.Cached != 0 || sum.Executed == 0 {
			var failed []string
			for _, l := range lines {
				if strings.Contains(l, `"event":"node_failed"`) {
					failed = append(failed, l)
				}
			}
			t.Errorf("%s checked with %v: exit %d, executed %d (checked %d), cached %d, failed %d; want every node reproduced\n%s\n%s",
				filepath.Base(b[0]), other, code, sum.Executed, sum.Checked, sum.Cached, sum.Failed, strings.Join(failed, "\n"), stderr)
		}
	}
}
