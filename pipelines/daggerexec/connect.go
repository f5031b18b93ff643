package daggerexec

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"dagger.io/dagger"

	"orkpipe/pipelines/daggerenv"
)

// cliVersion is the version of the Dagger CLI and engine this executor speaks to (package
// daggerenv; a test checks it against the dagger.io/dagger module).
const cliVersion = daggerenv.CLIVersion

// Aliases of package daggerenv, the part of the Dagger setup that does not link the SDK.
const (
	EngineVersion  = daggerenv.EngineVersion
	EnvCLIBin      = daggerenv.EnvCLIBin
	EnvRunnerHost  = daggerenv.EnvRunnerHost
	envSessionPort = daggerenv.EnvSessionPort
	howTo          = daggerenv.HowTo
)

// CheckEnvironment is daggerenv.CheckEnvironment.
func CheckEnvironment() error { return daggerenv.CheckEnvironment() }

func cliBinary() string { return daggerenv.CLIBinary() }

// connectConfig is what connect needs beyond the store.
type connectConfig struct {
	runnerHost string
	timeout    time.Duration
	logOutput  io.Writer
	logger     *slog.Logger
}

// session is an open dagger.io/dagger client; close ends it (and the CLI session process).
type session struct {
	client *dagger.Client
	cancel context.CancelFunc
}

func (s *session) close() error {
	err := s.client.Close()
	s.cancel()
	return err
}

// connect opens a session with dagger.Connect, time-boxed by cfg.timeout, and makes one round trip
// to the engine ({ version }). Outside `dagger run` the `dagger session` CLI process is started
// here (startCLISession, so that its failure is reported with its stderr) and handed to the SDK
// with dagger.WithConn. The process is tied to the context it is started with, so the session
// runs under its own context (not ctx), canceled by close or by a failed connect.
func connect(ctx context.Context, cfg connectConfig) (*session, error) {
	if err := CheckEnvironment(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	type result struct {
		c       *dagger.Client
		version string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		var opts []dagger.ClientOpt
		if os.Getenv(envSessionPort) == "" { // not under `dagger run`: a CLI session of our own
			conn, err := startCLISession(sctx, cliBinary(), cfg.runnerHost, cfg.logOutput)
			if err != nil {
				done <- result{err: err}
				return
			}
			opts = append(opts, dagger.WithConn(conn))
		}
		c, err := dagger.Connect(sctx, opts...)
		if err != nil {
			done <- result{err: err}
			return
		}
		v, err := c.Version(sctx) // the engine answers, not just the CLI
		if err != nil {
			c.Close()
			c = nil
		}
		done <- result{c: c, version: v, err: err}
	}()
	timer := time.NewTimer(cfg.timeout)
	defer timer.Stop()
	where := cfg.runnerHost
	if where == "" {
		where = os.Getenv(EnvRunnerHost)
	}
	if where == "" {
		where = "the default engine of the dagger CLI"
	}
	abandon := func() {
		cancel() // closes the CLI's stdin: the session ends and Connect returns
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
	}
	select {
	case r := <-done:
		if r.err != nil {
			cancel()
			return nil, fmt.Errorf("%w: connecting to %s: %v; %s", ErrNoEngine, where, r.err, howTo)
		}
		cfg.logger.Info("connected to the Dagger engine", "engine", where, "version", r.version)
		return &session{client: r.c, cancel: cancel}, nil
	case <-timer.C:
		abandon()
		return nil, fmt.Errorf("%w: no connection to %s within %s; %s", ErrNoEngine, where, cfg.timeout, howTo)
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	}
}
