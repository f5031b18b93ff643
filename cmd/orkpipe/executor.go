package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/internal/buildinfo"
	"orkpipe/pipelines/daggerenv"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/procexec"
)

// executorFlags select where a build's nodes run: --executor and --orkpipe-binary.
type executorFlags struct {
	kind   string
	binary string
}

func (f *executorFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kind, "executor", "local", "where nodes run: local (this process) or dagger (containers on a Dagger engine, through the orkpipe-dagger program; see docs/dagger.md)")
	cmd.Flags().StringVar(&f.binary, "orkpipe-binary", "", "with --executor dagger: the static linux/amd64 orkpipe run in the containers\n(default: this binary if it is one, else one built from the orkpipe module in the current directory)")
}

// check validates the flags before anything runs: an unknown executor is a usage error, and
// dagger fails at once when no engine is configured or the binary cannot run in a container.
func (f executorFlags) check() error {
	switch f.kind {
	case "local":
		if f.binary != "" {
			return usagef("--orkpipe-binary is only used with --executor dagger")
		}
		return nil
	case "dagger":
	default:
		return usagef("--executor: want local or dagger, got %q", f.kind)
	}
	if err := daggerenv.CheckEnvironment(); err != nil {
		return fmt.Errorf("--executor dagger: %w", err)
	}
	if f.binary != "" {
		if err := daggerenv.CheckBinary(f.binary); err != nil {
			return usagef("--orkpipe-binary: %v", err)
		}
	}
	return nil
}

// executor returns the executor for store (nil: the engine's local default) and a function that
// releases it. The Dagger executor is a process of its own (cmd/orkpipe-dagger, which links the
// Dagger SDK so that orkpipe does not; package procexec) started on the first node that must run,
// so a fully cached build needs neither it nor an engine; it connects time-boxed, and a failure
// fails that node with how to point orkpipe at an engine.
func (f executorFlags) executor(opts *globalOptions, store *artifacts.Store) (engine.Executor, func() error, error) {
	if f.kind != "dagger" {
		return nil, func() error { return nil }, nil
	}
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	l := &lazyDagger{flags: f, opts: opts, store: store}
	return l, l.close, nil
}

// lazyDagger starts the orkpipe-dagger process on first use.
type lazyDagger struct {
	flags executorFlags
	opts  *globalOptions
	store *artifacts.Store

	mu     sync.Mutex
	x      *procexec.Client
	err    error
	tmpDir string // holds the programs built from the module, when they were
}

var _ engine.ProvenanceExecutor = (*lazyDagger)(nil)

func (l *lazyDagger) get(ctx context.Context) (*procexec.Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.x != nil || l.err != nil {
		return l.x, l.err
	}
	bin, err := l.binary(ctx)
	var prog string
	if err == nil {
		prog, err = l.program(ctx)
	}
	if err == nil {
		l.x, err = startDaggerExecutor(ctx, prog, l.store.Dir(), bin, l.opts)
	}
	if err != nil && ctx.Err() == nil {
		l.err = err // a canceled connect may be retried; a failed one is not
	}
	return l.x, err
}

// startDaggerExecutor starts prog (orkpipe-dagger) on store with the containers' binary bin, its log
// on this process's stderr at this process's level. A program built from another revision than
// this orkpipe is refused: both are built from one tree.
func startDaggerExecutor(ctx context.Context, prog, store, bin string, opts *globalOptions) (*procexec.Client, error) {
	level := "warn"
	for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		if opts.logger.Enabled(ctx, lv) {
			level = lv.String()
			break
		}
	}
	cmd := exec.Command(prog, "--store", store, "--binary", bin, "--log-level", level)
	cmd.Stderr = opts.stderr
	c, err := procexec.Start(ctx, cmd)
	if err != nil {
		return nil, fmt.Errorf("--executor dagger: %w", err)
	}
	h := c.Hello()
	if self, err := buildinfo.Get(); err == nil {
		if err := sameTree(prog, self.Revision, h.Orkpipe.Revision); err != nil {
			c.Close()
			return nil, err
		}
	}
	opts.logger.Info("dagger executor process started", "program", prog, "version", h.Orkpipe.Version, "revision", h.Orkpipe.Revision, "binary", h.Orkpipe.Binary)
	return c, nil
}

// sameTree refuses an orkpipe-dagger (prog) whose VCS revision is known and not this orkpipe's.
func sameTree(prog, self, child string) error {
	if self == "" || child == "" || self == child {
		return nil
	}
	return fmt.Errorf("--executor dagger: %w: %s was built from revision %s, this orkpipe from %s: install both from one tree (CGO_ENABLED=0 go install ./cmd/orkpipe ./cmd/orkpipe-dagger)",
		procexec.ErrChild, prog, child, self)
}

// program finds orkpipe-dagger (daggerenv.FindExecutor), else builds it from the orkpipe module in
// the working directory (as `go run ./cmd/orkpipe` from a checkout needs).
func (l *lazyDagger) program(ctx context.Context) (string, error) {
	p, err := daggerenv.FindExecutor()
	if err == nil || !errors.Is(err, daggerenv.ErrNoExecutor) || os.Getenv(daggerenv.EnvExecutor) != "" {
		return p, err
	}
	wd, werr := os.Getwd()
	if werr != nil {
		return "", err
	}
	root, rerr := daggerenv.ModuleRoot(ctx, wd)
	if rerr != nil {
		return "", fmt.Errorf("--executor dagger: %w (and %v, so it cannot be built here)", err, rerr)
	}
	dir, err := l.scratch()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, daggerenv.ExecutorName)
	l.opts.logger.Info("building "+daggerenv.ExecutorName, "module", root, "output", out)
	if err := daggerenv.BuildExecutor(ctx, root, out); err != nil {
		return "", err
	}
	return out, nil
}

// scratch returns the directory for programs built from the module (removed by close).
func (l *lazyDagger) scratch() (string, error) {
	if l.tmpDir == "" {
		d, err := os.MkdirTemp("", "orkpipe-dagger-")
		if err != nil {
			return "", err
		}
		l.tmpDir = d
	}
	return l.tmpDir, nil
}

// binary resolves --orkpipe-binary, this executable, or a fresh build from the module in the
// working directory, in that order.
func (l *lazyDagger) binary(ctx context.Context) (string, error) {
	if l.flags.binary != "" {
		return l.flags.binary, nil
	}
	if p, err := daggerenv.SelfBinary(); err == nil {
		return p, nil
	} else if !errors.Is(err, daggerenv.ErrBadBinary) {
		return "", err
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := daggerenv.ModuleRoot(ctx, wd)
	if err != nil {
		return "", fmt.Errorf("--executor dagger: this orkpipe is not a static linux/amd64 binary and %v: pass --orkpipe-binary", err)
	}
	dir, err := l.scratch()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "orkpipe-linux-amd64")
	l.opts.logger.Info("building the static linux/amd64 orkpipe for the Dagger containers", "module", root, "output", out)
	if err := daggerenv.BuildBinary(ctx, root, out); err != nil {
		return "", err
	}
	return out, nil
}

func (l *lazyDagger) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	outs, _, err := l.ExecuteProvenance(ctx, req)
	return outs, err
}

func (l *lazyDagger) ExecuteProvenance(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, artifacts.Provenance, error) {
	x, err := l.get(ctx)
	if err != nil {
		return nil, artifacts.Provenance{}, err
	}
	return x.ExecuteProvenance(ctx, req)
}

func (l *lazyDagger) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.x != nil {
		err = l.x.Close()
	}
	if l.tmpDir != "" {
		os.RemoveAll(l.tmpDir)
	}
	return err
}
