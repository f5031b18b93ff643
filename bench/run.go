package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// env is what every row shares: the scratch directory, the binaries, the run count.
type env struct {
	ctx      context.Context
	dir      string // scratch, removed at the end
	runs     int
	longRuns int   // runs of the long rows
	size     int64 // bytes of the big file (hash, CAS, push/pull rows)
	profile  string
	orkpipe  string        // the orkpipe binary built for this run
	self     string        // this harness binary (GPTQ worker)
	blasSelf string        // this harness built with -tags blas ("" if not built)
	blasErr  string        // why the blas worker could not be built
	blas     bool          // orkpipe was built with -tags blas (-blas)
	lastCPU  time.Duration // user + system CPU of the last command that succeeded (its threads included)
	lastFlt  int64         // page faults (minor + major) of the last command that succeeded
	log      *slog.Logger
	bigFile  string
	corpus   string // calibration corpus for GPTQ recipes
	mem      int64  // --mem of the RTN and no-op builds

	gptqPureGo  bool // the GPTQ rows measure the pure-Go build too (-gptq-pure-go)
	calibPureGo bool // the calib row measures the pure-Go build too (-calib-pure-go)

	llamaQuantize    string // llama.cpp's llama-quantize ("" when not found)
	llamaQuantizeWhy string // why its measure is skipped
}

// llamaQuantizeHint says how to get llama-quantize: llama.cpp built from source.
const llamaQuantizeHint = "build llama.cpp from source: cmake -B build -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON && cmake --build build --target llama-quantize -j; then put build/bin on PATH or pass -llama-quantize"

// findLlamaQuantize returns the llama-quantize to run (flag, else PATH), or "" and why its measure
// is skipped.
func findLlamaQuantize(flagPath string) (string, string) {
	if flagPath != "" {
		if _, err := os.Stat(flagPath); err != nil {
			return "", fmt.Sprintf("skipped: -llama-quantize %s: %v (%s)", flagPath, err, llamaQuantizeHint)
		}
		return flagPath, ""
	}
	if p, err := exec.LookPath("llama-quantize"); err == nil {
		return p, ""
	}
	return "", "skipped: llama-quantize not on PATH (" + llamaQuantizeHint + ")"
}

// aptHint names the Debian package that installs a tool the harness compares with.
var aptHint = map[string]string{
	"b3sum":     "apt-get install -y b3sum",
	"sha256sum": "apt-get install -y coreutils",
	"cat":       "apt-get install -y coreutils",
	"cp":        "apt-get install -y coreutils",
	"stat":      "apt-get install -y coreutils",
	"sync":      "apt-get install -y coreutils",
	"sh":        "apt-get install -y dash",
	"oras":      "optional, not a Debian package: go install oras.land/oras/cmd/oras@v1.3.6",
	"crane":     "optional, not a Debian package: go install github.com/google/go-containerregistry/cmd/crane@v0.22.1",
}

// tool returns the path of name on PATH, or "" and the reason the measurement is skipped.
func tool(name string) (string, string) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, ""
	}
	return "", fmt.Sprintf("skipped: %s not on PATH (%s)", name, aptHint[name])
}

// step is one measure of a row: prepare runs untimed before every run; run does the timed work
// and returns its wall time and peak RSS in bytes (0 when it ran in this process). The peak RSS
// is kept only when rss is set: a child's ru_maxrss starts at the harness's own RSS at fork
// (tens of MiB), so it means something only for processes far bigger (builds, GPTQ workers).
type step struct {
	m       *Measure
	prepare func() error
	run     func() (time.Duration, int64, error)
	rss     bool
	// usage records each run's page faults in the measure, and its CPU where run did not (a build
	// step records its own): the command's rusage (env.lastCPU, env.lastFlt), so run must be one
	// command's.
	usage bool
}

// interleave runs every step once per round, in the given order (baselines first, then the
// subject), for runs rounds, so that load drifts hit all of them alike. The first error stops the
// row and is returned naming the measure.
func (e *env) interleave(runs int, steps ...step) error {
	for round := 0; round < runs; round++ {
		for _, s := range steps {
			if s.m.Skipped != "" {
				continue
			}
			if err := e.ctx.Err(); err != nil {
				return err
			}
			if s.prepare != nil {
				if err := s.prepare(); err != nil {
					return fmt.Errorf("%s: preparing run %d: %w", s.m.Label, round+1, err)
				}
			}
			d, rss, err := s.run()
			if err != nil {
				return fmt.Errorf("%s: run %d: %w", s.m.Label, round+1, err)
			}
			s.m.Samples = append(s.m.Samples, d.Seconds())
			if s.rss {
				s.m.PeakRSS = max(s.m.PeakRSS, rss)
			}
			if s.usage {
				s.m.Faults = append(s.m.Faults, float64(e.lastFlt))
				if len(s.m.CPU) < len(s.m.Samples) {
					s.m.CPU = append(s.m.CPU, e.lastCPU.Seconds())
				}
			}
			e.log.Info("measured", "measure", s.m.Label, "run", round+1, "seconds", fmt.Sprintf("%.3f", d.Seconds()), "peak_rss", rss)
		}
	}
	return nil
}

// command runs argv with stdout to stdout (nil: discarded) and returns its wall time and peak RSS.
// A non-zero exit is an error carrying the tail of its stderr.
func (e *env) command(stdout io.Writer, argv ...string) (time.Duration, int64, error) {
	return e.commandIn("", stdout, argv...)
}

// commandIn is command with working directory dir ("" for the current one).
//
// The peak RSS is the child's own: its rusage ru_maxrss starts at this process's memory high-water
// mark when it forks, so a ru_maxrss not above the harness's own VmHWM is replaced by the child's
// VmHWM sampled from /proc every 20 ms while it runs.
func (e *env) commandIn(dir string, stdout io.Writer, argv ...string) (time.Duration, int64, error) {
	cmd := exec.CommandContext(e.ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	// orkpipe's builds plan at the reference host's speeds: no probe of the host (a quarter of a
	// second, once a cache and binary) inside a timed cold build.
	cmd.Env = append(os.Environ(), "ORKPIPE_HOST_SPEEDS=reference")
	cmd.Stdout = stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	own := vmHWM("self")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	var sampled atomic.Int64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		pid := fmt.Sprint(cmd.Process.Pid)
		for {
			sampled.Store(max(sampled.Load(), vmHWM(pid)))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	d := time.Since(start)
	close(done)
	if err != nil {
		tail := stderr.String()
		if len(tail) > 2000 {
			tail = "..." + tail[len(tail)-2000:]
		}
		return d, 0, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(tail))
	}
	rss := sampled.Load()
	e.lastCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	e.lastFlt = 0
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		e.lastFlt = ru.Minflt + ru.Majflt
		if ru.Maxrss*1024 > own {
			rss = max(rss, ru.Maxrss*1024)
		}
	}
	return d, rss, nil
}

// vmHWM returns the VmHWM (peak RSS) of /proc/<pid>/status in bytes, 0 if unreadable.
func vmHWM(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			var kb int64
			fmt.Sscanf(f[1], "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

// cmdStep is a step that runs argv (stdout discarded).
func (e *env) cmdStep(m *Measure, prepare func() error, argv ...string) step {
	if m.Command == "" {
		m.Command = strings.Join(argv, " ")
	}
	return step{m: m, prepare: prepare, run: func() (time.Duration, int64, error) { return e.command(nil, argv...) }}
}

// catStep reads path once to /dev/null with cat (the read limit).
func (e *env) catStep(m *Measure, path string) step {
	m.Command = "cat " + path + " > /dev/null"
	return step{m: m, run: func() (time.Duration, int64, error) {
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return 0, 0, err
		}
		defer devnull.Close()
		return e.command(devnull, "cat", path)
	}}
}

// big returns the path of the harness's big random file (e.size bytes, written once, page cache
// warmed by one read).
func (e *env) big() (string, error) {
	if e.bigFile != "" {
		return e.bigFile, nil
	}
	p := filepath.Join(e.dir, "big.bin")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	rng := rand.NewChaCha8([32]byte{10})
	buf := make([]byte, 8<<20)
	for left := e.size; left > 0; {
		n := min(left, int64(len(buf)))
		rng.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return "", fmt.Errorf("writing %s: %w", p, err)
		}
		left -= n
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	if _, _, err := e.command(io.Discard, "cat", p); err != nil {
		return "", err
	}
	e.bigFile = p
	return p, nil
}

// fresh returns an empty directory under scratch named name, removing what was there.
func (e *env) fresh(name string) (string, error) {
	p := filepath.Join(e.dir, name)
	if err := os.RemoveAll(p); err != nil {
		return "", err
	}
	return p, os.MkdirAll(p, 0o755)
}

func timed(f func() error) (time.Duration, int64, error) {
	start := time.Now()
	err := f()
	return time.Since(start), 0, err
}
