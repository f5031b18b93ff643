package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/progress"
	"orkpipe/pipelines/remotecache"
	"orkpipe/pipelines/verify"
	"orkpipe/registry"
	"orkpipe/registry/cacherepo"
	"orkpipe/registry/oci"
)

// engineSetup is how a command's engine is configured beyond the global flags.
type engineSetup struct {
	keepGoing bool
	events    bool                              // report to a progress sink on stdout (JSON Lines with --json)
	exec      executorFlags                     // --executor, --orkpipe-binary
	remote    remoteFlags                       // --remote-cache
	board     *boardRequirement                 // a recipe's board_verify: serve verify-board from attestations
	wrap      func(progress.Sink) progress.Sink // e.g. build's renaming of outputs to roles
	eta       *progress.ETA                     // the events sink's estimator of the time left (nil: a new one)
	// readOnly: the command only reads the cache (plan, build --plan, explain --graph): it opens it
	// with openCacheForReading, read-only where it is not writable; there --remote-cache is not
	// consulted (a warning says so), since nothing it holds could be stored.
	readOnly bool
}

// engineSession is an open cache, its engine and the sink the engine reports to. Close releases
// them in order (sink, executor, store).
type engineSession struct {
	store   *artifacts.Store
	engine  *engine.Engine
	sink    progress.Sink
	closers []func() error
}

// Close closes the sink, then the executor, then the store; the first error is returned.
func (s *engineSession) Close() error {
	var first error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// remoteFlags select a registry-backed remote build cache.
type remoteFlags struct {
	repo      string // --remote-cache REGISTRY/REPO
	plainHTTP bool   // --remote-cache-plain-http
}

func (f *remoteFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.repo, "remote-cache", "", "registry repository (REGISTRY/REPO) that node results are read from and written to")
	cmd.Flags().BoolVar(&f.plainHTTP, "remote-cache-plain-http", false, "talk to the --remote-cache registry over plain HTTP (loopback or a trusted network only)")
}

// check validates the flags without contacting the registry, and returns the registry's host ("" when
// no remote cache was asked for). A command that does not open the remote cache checks them too, so
// that a malformed --remote-cache is the same usage error everywhere.
func (f remoteFlags) check() (host string, err error) {
	if f.repo == "" {
		if f.plainHTTP {
			return "", usagef("--remote-cache-plain-http needs --remote-cache")
		}
		return "", nil
	}
	host, _, ok := strings.Cut(f.repo, "/")
	if !ok || host == "" {
		return "", usagef("--remote-cache: want REGISTRY/REPO (e.g. registry.example.com/orkpipe/cache), got %q", f.repo)
	}
	if err := cacherepo.CheckName(f.repo); err != nil {
		return "", usagef("--remote-cache: want REGISTRY/REPO (e.g. registry.example.com/orkpipe/cache): %v", err)
	}
	return host, nil
}

// open returns the remote cache, or nil when none was asked for.
func (f remoteFlags) open(ctx context.Context, opts *globalOptions) (*cacherepo.Repo, error) {
	host, err := f.check()
	if err != nil || host == "" {
		return nil, err
	}
	ropts := []oci.Option{oci.WithLogger(opts.logger)}
	if f.plainHTTP {
		ropts = append(ropts, oci.WithPlainHTTP(host))
	}
	rc, err := cacherepo.Open(ctx, f.repo, ropts...)
	if err != nil {
		return nil, fmt.Errorf("--remote-cache %s: %w", f.repo, err)
	}
	return rc, nil
}

// boardRequirement is where a recipe's required board verification is looked for: the artifact
// reference its attestations are attached to, the registry options (transport and the trusted key).
type boardRequirement struct {
	ref     string
	options []registry.Option
}

// wrap returns next (nil: the local executor on store) behind a verify.Executor that serves
// verify-board nodes from signed attestations at the reference and runs nothing for them. With
// --executor dagger the other nodes still run in containers and keep their provenance.
func (b *boardRequirement) wrap(next engine.Executor, store engine.Store, opts *globalOptions) engine.Executor {
	if next == nil {
		next = engine.Local{Store: store, Logger: opts.logger}
	}
	verify.RegisterKind()
	return (&verify.Executor{Next: next, Store: store, Ref: b.ref, Options: b.options, Trusted: true, Logger: opts.logger}).Engine()
}

// openEngine opens the cache and an engine configured from the global flags and setup. The caller
// closes the session.
func openEngine(ctx context.Context, opts *globalOptions, setup engineSetup) (_ *engineSession, err error) {
	mem, err := opts.memBudget()
	if err != nil {
		return nil, err
	}
	if _, err := setup.remote.check(); err != nil { // also where the remote is not opened (below)
		return nil, err
	}
	open := openCacheStore
	if setup.readOnly {
		open = openCacheForReading
	}
	store, err := open(opts)
	if err != nil {
		return nil, err
	}
	s := &engineSession{store: store, closers: []func() error{store.Close}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	var es engine.Store = store
	if setup.remote.repo != "" && store.ReadOnly() {
		// Only a command that reads the cache opens it read-only (build --plan is the one with
		// --remote-cache): no build can run on this cache, so nothing the remote holds could be
		// stored in it (Engine.Status would only peek, but the remote is opened for pushing). Say so
		// once and do not ask.
		opts.logger.Warn("--remote-cache not consulted: the cache is not writable, so nothing it holds could be stored; the plan shows what the local cache holds",
			"remote_cache", setup.remote.repo, "cache", store.Dir())
	} else {
		rc, err := setup.remote.open(ctx, opts)
		if err != nil {
			return nil, err
		}
		if rc != nil {
			es = remotecache.New(store, rc, setup.remote.repo)
		}
	}
	s.sink = progress.NewText(opts.stderr, nil)
	if setup.events {
		s.sink = progress.Choose(opts.stdout, opts.json, setup.eta)
	}
	if setup.wrap != nil {
		s.sink = setup.wrap(s.sink)
	}
	engOpts := []engine.Option{engine.WithJobs(opts.jobs), engine.WithMemoryBudget(mem), engine.WithSink(s.sink),
		engine.WithKeepGoing(setup.keepGoing), engine.WithLogger(opts.logger)}
	ex, closeX, err := setup.exec.executor(opts, store)
	if err != nil {
		return nil, err
	}
	if ex != nil {
		s.closers = append(s.closers, closeX)
	}
	if setup.board != nil {
		ex = setup.board.wrap(ex, es, opts)
	}
	if ex != nil {
		engOpts = append(engOpts, engine.WithExecutor(ex))
	}
	s.closers = append(s.closers, s.sink.Close)
	if s.engine, err = engine.New(es, engOpts...); err != nil {
		return nil, err
	}
	return s, nil
}
