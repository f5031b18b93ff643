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
)

// cliVersion is the version of the dagger.io/dagger module in go.mod (a test checks it): the
// Dagger engine and CLI version this executor speaks to.
const cliVersion = "0.18.14"

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

// connectConfig is what Connect needs beyond the store.
type connectConfig struct {
	runnerHost string
	timeout    time.Duration
	logOutput  io.Writer
	logger     *slog.Logger
}

// connect opens a session (session.go), time-boxed by cfg.timeout, and makes one round trip to
// the engine. The session outlives ctx; it runs under its own context, canceled by close or by a
// failed connect.
func connect(ctx context.Context, cfg connectConfig) (*session, error) {
	if err := CheckEnvironment(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	type result struct {
		s       *session
		version string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		s, err := startSession(sctx, cfg)
		if err != nil {
			done <- result{err: err}
			return
		}
		var v string
		err = s.query().Select("version").Bind(&v).Execute(sctx) // the engine answers, not just the CLI
		if err != nil {
			s.close()
		}
		done <- result{s: s, version: v, err: err}
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
	select {
	case r := <-done:
		if r.err != nil {
			cancel()
			return nil, fmt.Errorf("%w: connecting to %s: %v; %s", ErrNoEngine, where, r.err, howTo)
		}
		r.s.cancel = cancel
		cfg.logger.Info("connected to the Dagger engine", "engine", where, "version", r.version)
		return r.s, nil
	case <-timer.C:
		cancel()
		return nil, fmt.Errorf("%w: no connection to %s within %s; %s", ErrNoEngine, where, cfg.timeout, howTo)
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}
