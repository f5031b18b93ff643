package boardhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// DefaultTailLines is how many lines of output a failed run reports.
const DefaultTailLines = 40

// killGrace is how long Run waits for a killed command to exit before judging the run without it.
const killGrace = 30 * time.Second

// RunRecord is what a run did: the command, the program that ran, how it ended, the scores and
// the input digests on both sides of it.
type RunRecord struct {
	Command   string        `json:"command"`
	Argv      []string      `json:"argv"`
	Program   *Program      `json:"program"`
	Mapped    []Object      `json:"mapped,omitempty"` // mapped at run time, not in Program (see RoleMapped)
	ExitCode  int           `json:"exit_code"`        // -1 when killed by a signal or never reaped
	Signal    string        `json:"signal,omitempty"` // the signal that ended it, if any
	TimedOut  bool          `json:"timed_out,omitempty"`
	Duration  time.Duration `json:"-"`
	DurationS float64       `json:"duration_s"`
	*Scores                 // flattened into "run": ppl, ppl_err, ppl_source, chunks, kld
	Before    []FileDigest  `json:"before"`
	After     []FileDigest  `json:"after,omitempty"`
	Tail      []string      `json:"tail"`
}

// RunOption configures [Run].
type RunOption func(*runConfig) error

type runConfig struct {
	timeout    time.Duration
	env        []string
	dir        string
	tail       int
	output     io.Writer
	allowNoPPL bool
	resolve    []ResolveOption
	sampling   time.Duration
}

// WithTimeout bounds the run (required to be positive; default 6 hours, a full 27B screen on a
// board takes about one).
func WithTimeout(d time.Duration) RunOption {
	return func(c *runConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout must be positive, got %v", ErrOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithRunEnv sets the command's environment (default os.Environ()).
func WithRunEnv(env []string) RunOption {
	return func(c *runConfig) error {
		for _, kv := range env {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("%w: environment entry %q is not KEY=VALUE", ErrOption, kv)
			}
		}
		c.env = env
		return nil
	}
}

// WithDir sets the command's working directory (must exist).
func WithDir(dir string) RunOption {
	return func(c *runConfig) error {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("%w: working directory %q is not a directory", ErrOption, dir)
		}
		c.dir = dir
		return nil
	}
}

// WithTailLines sets how many output lines are kept for the report (1..10000).
func WithTailLines(n int) RunOption {
	return func(c *runConfig) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("%w: tail lines must be in 1..10000, got %d", ErrOption, n)
		}
		c.tail = n
		return nil
	}
}

// WithOutput also copies the command's combined output to w as it arrives.
func WithOutput(w io.Writer) RunOption {
	return func(c *runConfig) error {
		if w == nil {
			return fmt.Errorf("%w: nil output writer", ErrOption)
		}
		c.output = w
		return nil
	}
}

// WithoutScore accepts a run that prints no perplexity (a smoke test rather than a screen).
func WithoutScore() RunOption {
	return func(c *runConfig) error { c.allowNoPPL = true; return nil }
}

// WithMapSampling sets how often the command's processes' executable mappings are sampled
// (default 200ms; see RunRecord.Mapped).
func WithMapSampling(d time.Duration) RunOption {
	return func(c *runConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: map sampling interval must be positive, got %v", ErrOption, d)
		}
		c.sampling = d
		return nil
	}
}

// WithRunResolve passes options to the fingerprinting of the run program.
func WithRunResolve(opts ...ResolveOption) RunOption {
	return func(c *runConfig) error { c.resolve = append(c.resolve, opts...); return nil }
}

// Run executes command (split and expanded as the package documentation says) against in,
// guarded: it fingerprints the program, hashes the inputs, runs the command in its own process
// group under the timeout, kills the group when the command ends, hashes the inputs again and
// parses the output. The record is returned whenever the command was started, also with an
// error; the error wraps ErrPackChanged/ErrStubChanged/ErrTextChanged (checked first, whatever
// the exit status), ErrTimeout, ErrExit, ErrNoScore or ErrPerplexityOutput, joined when several
// hold. Cancelling ctx kills the command and returns ctx's error without hashing again. A command
// still alive 30 s after SIGKILL (uninterruptible sleep in a driver, which the board project
// saw) is abandoned: the run fails with ErrTimeout naming its pid.
func Run(ctx context.Context, command string, in Inputs, opts ...RunOption) (*RunRecord, error) {
	cfg := runConfig{timeout: 6 * time.Hour, env: os.Environ(), tail: DefaultTailLines, sampling: 200 * time.Millisecond}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if in.Pack == "" {
		return nil, fmt.Errorf("%w: no pack path", ErrCommand)
	}
	words, err := SplitCommand(command)
	if err != nil {
		return nil, err
	}
	argv, err := ExpandCommand(words, in)
	if err != nil {
		return nil, err
	}
	prog, err := ResolveProgram(ctx, argv[0], append([]ResolveOption{WithResolveEnv(cfg.env)}, cfg.resolve...)...)
	if err != nil {
		return nil, err
	}
	files := in.files()
	before, err := hashAll(ctx, files)
	if err != nil {
		return nil, err
	}
	rec := &RunRecord{Command: command, Argv: argv, Program: prog, ExitCode: -1, Before: before}

	runCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	sink := newOutputSink(cfg.tail, cfg.output)
	cmd := exec.CommandContext(runCtx, prog.Path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env, cmd.Dir = cfg.env, cfg.dir
	cmd.Stdout, cmd.Stderr = sink, sink
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: starting %s: %v", ErrExit, prog.Path, err)
	}
	sampler := newMapSampler(cmd.Process.Pid, cfg.sampling)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { sampler.run(sampleCtx); close(sampled) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var waitErr error
	unkillable := false
	select {
	case waitErr = <-done:
	case <-runCtx.Done():
		// exec's Cancel SIGKILLs the group; a process in uninterruptible sleep (a driver bug)
		// survives that. Do not wait for it forever: judge the run without it.
		select {
		case waitErr = <-done:
		case <-time.After(killGrace):
			unkillable = true
		}
	}
	stopSampling()
	<-sampled
	_ = killGroup(cmd) // stragglers must not touch the inputs after the run is judged
	rec.Duration = time.Since(start)
	rec.DurationS = rec.Duration.Seconds()
	scores, tail, parseErr := sink.finish()
	rec.Scores, rec.Tail = scores, tail
	if !unkillable && cmd.ProcessState != nil {
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			rec.ExitCode = st.ExitStatus()
			if st.Signaled() {
				rec.Signal = st.Signal().String()
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return rec, fmt.Errorf("run of %s interrupted (inputs not re-hashed): %w", argv[0], err)
	}
	rec.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded)

	var errs []error
	after, err := hashAll(ctx, files)
	if err != nil {
		return rec, err
	}
	rec.After = after
	rec.Mapped = sampler.extra(ctx, prog)
	for i := range files {
		if before[i].Digest != after[i].Digest {
			errs = append(errs, fmt.Errorf("%w: %s %s -> %s (%d -> %d bytes)", files[i].changed, files[i].path, before[i].Digest, after[i].Digest, before[i].Size, after[i].Size))
		}
	}
	switch {
	case rec.TimedOut && unkillable:
		errs = append(errs, fmt.Errorf("%w after %v: %s; SIGKILL sent to its process group but pid %d did not exit within %v (uninterruptible sleep in a driver?); last output:\n%s", ErrTimeout, cfg.timeout, argv[0], cmd.Process.Pid, killGrace, strings.Join(tail, "\n")))
	case rec.TimedOut:
		errs = append(errs, fmt.Errorf("%w after %v: %s; process group killed; last output:\n%s", ErrTimeout, cfg.timeout, argv[0], strings.Join(tail, "\n")))
	case waitErr != nil:
		how := fmt.Sprintf("exit status %d", rec.ExitCode)
		if rec.Signal != "" {
			how = "killed by signal " + rec.Signal
		}
		errs = append(errs, fmt.Errorf("%w: %s: %s (%v); last output:\n%s", ErrExit, argv[0], how, waitErr, strings.Join(tail, "\n")))
	case parseErr != nil:
		errs = append(errs, parseErr)
	case scores == nil && !cfg.allowNoPPL:
		errs = append(errs, fmt.Errorf("%w: %s exited 0 without \"Final estimate: PPL\" or \"Mean PPL(Q)\"; last output:\n%s", ErrNoScore, argv[0], strings.Join(tail, "\n")))
	}
	return rec, errors.Join(errs...)
}

// killGroup SIGKILLs the command's process group (its pgid is its pid, see Setpgid).
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

type inputFile struct {
	role, path string
	changed    error
}

func (in Inputs) files() []inputFile {
	files := []inputFile{{"pack", in.Pack, ErrPackChanged}}
	if in.Stub != "" {
		files = append(files, inputFile{"stub", in.Stub, ErrStubChanged})
	}
	if in.Text != "" {
		files = append(files, inputFile{"text", in.Text, ErrTextChanged})
	}
	return files
}

// HashInputs hashes the pack and, when given, the stub and text (BLAKE3, streaming), for a
// report of a verification without a run. The digests carry their roles.
func HashInputs(ctx context.Context, in Inputs) ([]FileDigest, error) {
	if in.Pack == "" {
		return nil, fmt.Errorf("%w: no pack path", ErrCommand)
	}
	return hashAll(ctx, in.files())
}

// hashAll hashes the files concurrently (at most two at a time: the board has slow storage and
// the digests are I/O bound).
func hashAll(ctx context.Context, files []inputFile) ([]FileDigest, error) {
	out := make([]FileDigest, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2)
	for i, f := range files {
		g.Go(func() error {
			d, err := hashFile(gctx, f.path)
			if err != nil {
				return fmt.Errorf("hashing input %s: %w", f.path, err)
			}
			d.Role = f.role
			out[i] = d
			return nil
		})
	}
	return out, g.Wait()
}
