package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/pipelines/daggerexec"
	"orkpipe/pipelines/engine"
)

// executorFlags select where a build's nodes run: --executor and --orkpipe-binary.
type executorFlags struct {
	kind   string
	binary string
}

func (f *executorFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kind, "executor", "local", "where nodes run: local (this process) or dagger (containers on a Dagger engine, see docs/dagger.md)")
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
	if err := daggerexec.CheckEnvironment(); err != nil {
		return fmt.Errorf("--executor dagger: %w", err)
	}
	if f.binary != "" {
		if err := daggerexec.CheckBinary(f.binary); err != nil {
			return usagef("--orkpipe-binary: %v", err)
		}
	}
	return nil
}

// executor returns the executor for store (nil: the engine's local default) and a function that
// releases it. The Dagger executor connects on its first node, time-boxed, so a fully cached
// build needs no engine; a connection failure fails that node with how to point orkpipe at one.
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

// lazyDagger connects a daggerexec.Executor on first use.
type lazyDagger struct {
	flags executorFlags
	opts  *globalOptions
	store *artifacts.Store

	mu     sync.Mutex
	x      *daggerexec.Executor
	err    error
	tmpDir string // holds a binary built for the containers
}

var _ engine.ProvenanceExecutor = (*lazyDagger)(nil)

func (l *lazyDagger) get(ctx context.Context) (*daggerexec.Executor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.x != nil || l.err != nil {
		return l.x, l.err
	}
	bin, err := l.binary(ctx)
	if err == nil {
		l.x, err = daggerexec.New(ctx, l.store, daggerexec.WithBinary(bin), daggerexec.WithLogger(l.opts.logger))
	}
	if err != nil && ctx.Err() == nil {
		l.err = err // a canceled connect may be retried; a failed one is not
	}
	return l.x, err
}

// binary resolves --orkpipe-binary, this executable, or a fresh build from the module in the
// working directory, in that order.
func (l *lazyDagger) binary(ctx context.Context) (string, error) {
	if l.flags.binary != "" {
		return l.flags.binary, nil
	}
	if p, err := daggerexec.SelfBinary(); err == nil {
		return p, nil
	} else if !errors.Is(err, daggerexec.ErrBadBinary) {
		return "", err
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := daggerexec.ModuleRoot(ctx, wd)
	if err != nil {
		return "", fmt.Errorf("--executor dagger: this orkpipe is not a static linux/amd64 binary and %v: pass --orkpipe-binary", err)
	}
	if l.tmpDir, err = os.MkdirTemp("", "orkpipe-dagger-"); err != nil {
		return "", err
	}
	out := filepath.Join(l.tmpDir, "orkpipe-linux-amd64")
	l.opts.logger.Info("building the static linux/amd64 orkpipe for the Dagger containers", "module", root, "output", out)
	if err := daggerexec.BuildBinary(ctx, root, out); err != nil {
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
