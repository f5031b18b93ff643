package boardhost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunGoodPerplexity(t *testing.T) {
	in := tempInputs(t, "ORKPACK-Q4")
	cmd := script(t, "fake-llama-perplexity-good.sh") + " -m {stub} --ork-pack {pack} -f {text}"
	var live bytes.Buffer
	rec, err := Run(context.Background(), cmd, in, WithOutput(&live))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rec.Scores == nil || rec.PPL != 2.6798 || rec.PPLErr != 0.03512 || rec.Chunks != 39 || rec.PPLSource != PPLFromFinalEstimate {
		t.Fatalf("scores = %+v, want PPL 2.6798 +/- 0.03512 over 39 chunks from the final estimate", rec.Scores)
	}
	if rec.ExitCode != 0 || rec.TimedOut || rec.Signal != "" {
		t.Errorf("exit = %d, timed out %t, signal %q", rec.ExitCode, rec.TimedOut, rec.Signal)
	}
	if !strings.Contains(live.String(), "Final estimate: PPL = 2.6798") {
		t.Errorf("WithOutput did not receive the output: %q", live.String())
	}
	if want := []string{script(t, "fake-llama-perplexity-good.sh"), "-m", in.Stub, "--ork-pack", in.Pack, "-f", in.Text}; strings.Join(rec.Argv, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("argv = %q, want %q", rec.Argv, want)
	}
	// The program is the script and its #! interpreter with the interpreter's closure.
	if len(rec.Program.Objects) < 2 || rec.Program.Objects[0].Role != RoleProgram || rec.Program.Objects[1].Role != RoleScriptInterpreter || rec.Program.Objects[1].Name != "/bin/sh" {
		t.Errorf("program objects = %+v", rec.Program.Objects)
	}
	if len(rec.Before) != 3 || len(rec.After) != 3 {
		t.Fatalf("before %v after %v: want pack, stub, text", rec.Before, rec.After)
	}
	for i, role := range []string{"pack", "stub", "text"} {
		b, a := rec.Before[i], rec.After[i]
		if b.Role != role || !validDigest(b.Digest) || b != a {
			t.Errorf("%s: before %+v after %+v", role, b, a)
		}
	}
	want, err := hashFile(context.Background(), in.Pack)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Before[0].Digest != want.Digest || rec.Before[0].Size != 3<<20+10 {
		t.Errorf("pack digest %+v, want %+v", rec.Before[0], want)
	}

	var r Report
	r.SetRun(rec, err)
	if !r.OK() {
		t.Fatalf("report not OK: %+v", r.Checks)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		OK  bool `json:"ok"`
		Run struct {
			PPL float64 `json:"ppl"`
		} `json:"run"`
	}
	if err := json.Unmarshal(b, &raw); err != nil || !raw.OK || raw.Run.PPL != 2.6798 {
		t.Errorf("report JSON: ok %t run.ppl %v (%v): %s", raw.OK, raw.Run.PPL, err, b)
	}
}

func TestRunGoodKLDivergence(t *testing.T) {
	in := tempInputs(t, "ORKPACK-Q4")
	cmd := script(t, "fake-llama-perplexity-good.sh") + " -m {stub} --ork-pack {pack} --kl-divergence"
	rec, err := Run(context.Background(), cmd, in)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	s := rec.Scores
	if s == nil || s.PPL != 2.6798 || s.PPLSource != PPLFromMeanPPLQ || s.Chunks != 39 {
		t.Fatalf("scores = %+v, want PPL 2.6798 from Mean PPL(Q), 39 chunks", s)
	}
	want := map[string]float64{
		"ppl_base": 2.4871, "mean": 0.06558, "mean_err": 0.000832, "max": 2.811254, "p99": 0.457112,
		"median": 0.037221, "p0_1": 0.000001, "min": -0.000003, "same_top_p_pct": 91.234,
		"same_top_p_pct_err": 0.225, "rms_dp_pct": 5.321, "ppl_cor_pct": 97.52, "mean_dp_pct": -1.234,
	}
	for k, v := range want {
		if got, ok := s.KLD[k]; !ok || got != v {
			t.Errorf("kld[%s] = %v (present %t), want %v", k, got, ok, v)
		}
	}
}

func TestRunDetectsRewrittenInputs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command string
		want    error
		wantMsg string
	}{
		{"pack", " -m {stub} --ork-pack {pack}", ErrPackChanged, "pack changed during run"},
		{"stub", " -m {pack} --ork-pack {stub}", ErrStubChanged, "stub changed during run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tempInputs(t, "ORKPACK-Q4")
			writable(t, in.Pack, in.Stub)
			rec, err := Run(context.Background(), script(t, "fake-llama-perplexity-rewrites-pack.sh")+tc.command, in)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			// The command "succeeded" and printed a plausible score: only the hashes expose it.
			if rec.ExitCode != 0 || rec.Scores == nil || rec.PPL != 2.4871 {
				t.Errorf("exit %d scores %+v", rec.ExitCode, rec.Scores)
			}
			if rec.Before[0].Size != rec.After[0].Size {
				t.Errorf("the stand-in must keep the size: %d -> %d", rec.Before[0].Size, rec.After[0].Size)
			}
			var r Report
			r.SetRun(rec, err)
			if r.OK() || strings.Join(r.Failed(), ",") != "inputs-unchanged,run" {
				t.Errorf("report OK %t failed %v", r.OK(), r.Failed())
			}
		})
	}
}

func TestRunNonZeroExit(t *testing.T) {
	in := tempInputs(t, "")
	rec, err := Run(context.Background(), script(t, "fake-llama-perplexity-fails.sh")+" -m {stub} --ork-pack {pack}", in)
	if !errors.Is(err, ErrExit) || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("err = %v, want ErrExit with exit status 1", err)
	}
	if rec.ExitCode != 1 || len(rec.Tail) != DefaultTailLines {
		t.Fatalf("exit %d, %d tail lines", rec.ExitCode, len(rec.Tail))
	}
	// 62 lines were printed: the tail is lines 23..62.
	if !strings.Contains(rec.Tail[0], "tensor 23:") || rec.Tail[39] != "main: unable to load model" {
		t.Errorf("tail = %q ... %q", rec.Tail[0], rec.Tail[39])
	}
	if !strings.Contains(err.Error(), "BLAKE3 mismatch") || strings.Contains(err.Error(), "tensor 22:") {
		t.Errorf("error should carry exactly the tail: %v", err)
	}
}

func TestRunTimeoutKillsProcessGroup(t *testing.T) {
	in := tempInputs(t, "")
	pidfile := filepath.Join(t.TempDir(), "child.pid")
	rec, err := Run(context.Background(), script(t, "fake-llama-perplexity-hangs.sh")+" -m {stub} --ork-pack {pack} --pidfile "+pidfile, in,
		WithTimeout(time.Second))
	if !errors.Is(err, ErrTimeout) || !rec.TimedOut {
		t.Fatalf("err = %v, timed out %t; want ErrTimeout", err, rec.TimedOut)
	}
	if !strings.Contains(err.Error(), "[1]2.6139,") || rec.Signal != "killed" {
		t.Errorf("err = %v, signal %q: want the output tail and SIGKILL", err, rec.Signal)
	}
	assertGone(t, pidfile)
}

func TestRunCancelKillsProcessGroup(t *testing.T) {
	in := tempInputs(t, "")
	pidfile := filepath.Join(t.TempDir(), "child.pid")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if b, err := os.ReadFile(pidfile); err == nil && len(bytes.TrimSpace(b)) > 0 {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	rec, err := Run(ctx, script(t, "fake-llama-perplexity-hangs.sh")+" -m {stub} --ork-pack {pack} --pidfile "+pidfile, in)
	if !errors.Is(err, context.Canceled) || rec == nil || rec.After != nil {
		t.Fatalf("err = %v, rec %+v: want context.Canceled and no after-hash", err, rec)
	}
	assertGone(t, pidfile)
}

// assertGone checks the stand-in's grandchild (same process group) no longer runs.
func assertGone(t *testing.T, pidfile string) {
	t.Helper()
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL is delivered asynchronously; the orphan is then reaped by init. Allow a moment.
	for i := 0; i < 500; i++ {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("child %d of the timed-out command is still running", pid)
}

func TestRunWithoutScore(t *testing.T) {
	in := tempInputs(t, "")
	_, err := Run(context.Background(), "echo loaded {pack}", in)
	if !errors.Is(err, ErrNoScore) || !strings.Contains(err.Error(), "loaded "+in.Pack) {
		t.Fatalf("err = %v, want ErrNoScore with the tail", err)
	}
	rec, err := Run(context.Background(), "echo loaded {pack}", in, WithoutScore())
	if err != nil || rec.Scores != nil {
		t.Fatalf("WithoutScore: err %v scores %+v", err, rec.Scores)
	}
}

func TestRunRefusesBeforeStarting(t *testing.T) {
	in := tempInputs(t, "")
	for _, tc := range []struct {
		name, command string
		in            Inputs
		opts          []RunOption
		want          error
	}{
		{"no pack or stub", "echo {text}", in, nil, ErrCommand},
		{"unknown placeholder", "echo {pak}", in, nil, ErrCommand},
		{"missing stub path", "echo {pack} {stub}", Inputs{Pack: in.Pack}, nil, ErrCommand},
		{"no pack", "echo {stub}", Inputs{Stub: in.Stub}, nil, ErrCommand},
		{"bad quoting", "echo '{pack}", in, nil, ErrCommand},
		{"missing program", "no-such-runtime-xyz {pack}", in, nil, ErrProgram},
		{"missing pack file", "echo {pack}", Inputs{Pack: in.Pack + ".missing"}, nil, os.ErrNotExist},
		{"zero timeout", "echo {pack}", in, []RunOption{WithTimeout(0)}, ErrOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := Run(context.Background(), tc.command, tc.in, tc.opts...)
			if !errors.Is(err, tc.want) || rec != nil {
				t.Fatalf("err = %v rec %v, want %v and no record", err, rec, tc.want)
			}
		})
	}
}
