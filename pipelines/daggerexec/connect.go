package daggerexec

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"dagger.io/dagger"
	"dagger.io/dagger/engineconn"
)

// cliVersion is the version of the dagger.io/dagger module in go.mod (a test checks it): the
// Dagger engine and CLI version this executor speaks to.
const cliVersion = engineconn.CLIVersion

// EngineVersion is the Dagger engine and CLI version this executor is built and tested against.
const EngineVersion = "v" + cliVersion

// Environment variables of the Dagger SDK that select the engine.
const (
	EnvCLIBin      = "_EXPERIMENTAL_DAGGER_CLI_BIN"
	EnvRunnerHost  = "_EXPERIMENTAL_DAGGER_RUNNER_HOST"
	envSessionPort = "DAGGER_SESSION_PORT"
)

// howTo is appended to every ErrNoEngine: how to point orkpipe at an engine.
const howTo = "point orkpipe at one with the Dagger SDK's environment: " + EnvCLIBin + "=/path/to/dagger (the dagger CLI " +
	EngineVersion + ") and, for an engine that is not started locally through Docker, " + EnvRunnerHost +
	"=tcp://HOST:PORT | unix:///run/dagger/engine.sock | kube-pod://POD?namespace=NS | docker-container://NAME; " +
	"or run orkpipe under `dagger run`. Use --executor local to build on this machine. See docs/dagger.md"

// CheckEnvironment reports, without connecting, whether the SDK environment names a way to reach
// an engine: a `dagger run` session, a dagger CLI in _EXPERIMENTAL_DAGGER_CLI_BIN, or a CLI the SDK
// has already downloaded into the user cache. Otherwise it returns an error wrapping ErrNoEngine
// that says how to point orkpipe at an engine.
func CheckEnvironment() error {
	if os.Getenv(envSessionPort) != "" {
		return nil
	}
	if bin, ok := os.LookupEnv(EnvCLIBin); ok {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%w: %s=%q: %v; %s", ErrNoEngine, EnvCLIBin, bin, err, howTo)
		}
		return nil
	}
	if p := downloadedCLI(); p != "" {
		return nil
	}
	hint := ""
	if p, err := exec.LookPath("dagger"); err == nil {
		hint = fmt.Sprintf(" (a dagger CLI is on PATH at %s: set %s=%s)", p, EnvCLIBin, p)
	}
	return fmt.Errorf("%w configured%s: %s", ErrNoEngine, hint, howTo)
}

// cliBinary returns the dagger CLI that CheckEnvironment found: _EXPERIMENTAL_DAGGER_CLI_BIN, else
// the one the SDK downloaded earlier.
func cliBinary() string {
	if bin, ok := os.LookupEnv(EnvCLIBin); ok {
		if p, err := exec.LookPath(bin); err == nil {
			return p
		}
		return bin
	}
	return downloadedCLI()
}

// downloadedCLI returns the CLI the SDK would use from its cache, or "".
func downloadedCLI() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	p := filepath.Join(base, "dagger", "dagger-"+cliVersion)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p
	}
	return ""
}

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
